//! Plugins from an OCI registry: a real registry (Debian's `docker-registry`, the CNCF
//! distribution registry) on 127.0.0.1 with its storage in a temporary directory; `cordon
//! plugin push`, installs by tag and by digest pinned in the lock, and refusals that leave the
//! home unchanged: no signature check waived, a tampered layer, a digest the registry does not
//! have, a manifest that is not a Wasm component artifact. Signatures (cosign's key-pair
//! scheme) decide what installs; `plugin outdated` and `plugin update` follow tags and ask
//! again; and artifacts move both ways between Cordon and another OCI tool (the `oras` SDK).

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cordon_tests::{TestHome, file_digest, fixture};

/// A registry serving from a temporary directory until dropped.
pub(super) struct Registry {
    child: Child,
    storage: PathBuf,
    pub(super) port: u16,
    _dir: tempfile::TempDir,
}

/// The password of the user `publisher` in a registry started with [`Registry::with_login`].
const REGISTRY_PASSWORD: &str = "plugin-pass";

impl Registry {
    pub(super) fn start() -> Registry {
        Registry::start_with("")
    }

    /// A registry that wants the user `publisher` with [`REGISTRY_PASSWORD`] for everything.
    fn with_login() -> Registry {
        Registry::start_with(
            // bcrypt of REGISTRY_PASSWORD, as htpasswd writes it.
            "publisher:$2b$05$koXM3c5YDq/RDH7cBaVPvuGhbRDCClyrhl8PqGclDCslTVLEYOmdi\n",
        )
    }

    fn start_with(htpasswd: &str) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  \
                 delete: {{enabled: true}}\nhttp: {{addr: 127.0.0.1:{port}}}\n{}",
                storage.display(),
                if htpasswd.is_empty() {
                    String::new()
                } else {
                    let file = dir.path().join("htpasswd");
                    std::fs::write(&file, htpasswd).unwrap();
                    format!(
                        "auth:\n  htpasswd: {{realm: cordon-tests, path: {}}}\n",
                        file.display()
                    )
                }
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry runs (make test-services installs it)");
        let registry = Registry {
            child,
            storage,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    pub(super) fn reference(&self, rest: &str) -> String {
        format!("oci://127.0.0.1:{}/{rest}", self.port)
    }

    /// The stored blob with `digest`.
    fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pushes `manifest` (with the blobs it names) to `repo:tag` as another tool would, over the
/// registry's HTTP API.
pub(super) fn push_raw(
    registry: &Registry,
    repo: &str,
    tag: &str,
    blobs: &[&[u8]],
    media_type: &str,
    manifest: &str,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = format!("http://127.0.0.1:{}/v2/{repo}", registry.port);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = reqwest::Client::new();
        for blob in blobs {
            let digest = format!("sha256:{}", sha256_hex(blob));
            let started = client
                .post(format!("{base}/blobs/uploads/"))
                .send()
                .await
                .unwrap();
            let location = started.headers()["location"].to_str().unwrap().to_string();
            let location = if location.starts_with("http") {
                location
            } else {
                format!("http://127.0.0.1:{}{location}", registry.port)
            };
            let separator = if location.contains('?') { '&' } else { '?' };
            let done = client
                .put(format!("{location}{separator}digest={digest}"))
                .header("Content-Type", "application/octet-stream")
                .body(blob.to_vec())
                .send()
                .await
                .unwrap();
            assert!(done.status().is_success(), "blob upload: {}", done.status());
        }
        let done = client
            .put(format!("{base}/manifests/{tag}"))
            .header("Content-Type", media_type)
            .body(manifest.to_string())
            .send()
            .await
            .unwrap();
        assert!(
            done.status().is_success(),
            "manifest: {} {}",
            done.status(),
            done.text().await.unwrap()
        );
    });
}

pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The manifest digest `cordon plugin push` printed.
pub(super) fn pushed(home: &TestHome, file: &Path, reference: &str) -> String {
    let run = home
        .cordon(&["plugin", "push", &file.display().to_string(), reference])
        .ok()
        .stdout_has(&["Pushed"]);
    let start = run.stdout.find("(sha256:").expect("a digest") + 1;
    run.stdout[start..start + 71].to_string()
}

#[test]
fn push_then_install_by_tag_and_by_digest_pinned_in_the_lock() {
    let registry = Registry::start();
    let home = TestHome::new();
    let tag = registry.reference("plugins/typed:1.0");
    let manifest = pushed(&home, &fixture("typed"), &tag);

    // Registry plugins need a signature by a trusted key, or the user's explicit waiver.
    home.fails_unchanged(&["plugin", "install", &tag], 2)
        .stderr_has(&[
            "you trust no keys yet",
            "cordon trust add",
            "--allow-unsigned",
        ]);
    home.cordon(&["plugin", "install", &tag, "--allow-unsigned"])
        .ok()
        .stdout_has(&["Plugin `typed`", "calc_add", "Installed plugin `typed`"]);
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(
        lock.contains(&format!("oci_manifest = \"{manifest}\"")),
        "{lock}"
    );
    assert!(lock.contains("unsigned = true"), "{lock}");
    assert!(
        lock.contains(&format!("digest = \"{}\"", file_digest(&fixture("typed")))),
        "{lock}"
    );
    home.cordon(&["plugin", "list"])
        .ok()
        .stdout_has(&["typed", "(unsigned)"]);
    home.cordon(&["call", "calc_add", r#"{"a": 1, "b": 2}"#])
        .ok()
        .stdout_has(&["3"]);

    // By digest: the manifest must be the one the digest names.
    let pinned = registry.reference(&format!("plugins/typed@{manifest}"));
    home.cordon(&[
        "plugin",
        "install",
        &pinned,
        "--allow-unsigned",
        "--name",
        "pinned",
    ])
    .ok();
    let absent = registry.reference(&format!("plugins/typed@sha256:{}", "0".repeat(64)));
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &absent,
            "--allow-unsigned",
            "--name",
            "x",
        ],
        1,
    )
    .stderr_has(&["registry error for", "plugins/typed@sha256:000"]);
}

#[test]
fn a_tampered_layer_or_an_artifact_without_a_component_installs_nothing() {
    let registry = Registry::start();
    let home = TestHome::new();
    let tag = registry.reference("plugins/noop:1.0");
    pushed(&home, &fixture("noop"), &tag);
    let (key, public) = keygen(&home, "publisher");
    home.cordon(&["trust", "add", &public]).ok();
    home.cordon(&["plugin", "sign", &tag, "--key", &key]).ok();
    // Someone with access to the registry's storage swaps the component's bytes: the
    // manifest, and so its signature, stay valid; the layer's digest does not.
    let layer = registry.blob(&file_digest(&fixture("noop")));
    let mut bytes = std::fs::read(&layer).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&layer, bytes).unwrap();
    for args in [
        vec!["plugin", "install", &tag],
        vec!["plugin", "install", &tag, "--allow-unsigned"],
    ] {
        home.fails_unchanged(&args, 1).stderr_has(&[
            "digest mismatch for the component layer of oci://127.0.0.1:",
            &format!("expected {}", file_digest(&fixture("noop"))),
        ]);
    }

    // Not an oci:// registry reference Cordon accepts.
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            "oci://library/noop:1",
            "--allow-unsigned",
        ],
        2,
    )
    .stderr_has(&["Cordon does not assume Docker Hub"]);
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &registry.reference("plugins/noop"),
            "--allow-unsigned",
        ],
        2,
    )
    .stderr_has(&["name a tag"]);
    // A file that is not a component is not pushed.
    let not_wasm = home.scratch("x").join("notes.txt");
    std::fs::write(&not_wasm, "hello").unwrap();
    home.cordon(&[
        "plugin",
        "push",
        &not_wasm.display().to_string(),
        &registry.reference("plugins/notes:1"),
    ])
    .code(2)
    .stderr_has(&["cannot be pushed", "not a WebAssembly component"]);
}

#[test]
fn artifacts_that_are_not_one_wasm_component_are_refused_naming_what_they_are() {
    let registry = Registry::start();
    let home = TestHome::new();
    let config = br#"{"architecture":"amd64","os":"linux"}"#;
    let layer = b"not a component, a tarball";
    let image = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:{}","size":{}}}]}}"#,
        sha256_hex(config),
        config.len(),
        sha256_hex(layer),
        layer.len()
    );
    push_raw(
        &registry,
        "images/app",
        "1",
        &[config, layer],
        "application/vnd.oci.image.manifest.v1+json",
        &image,
    );
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &registry.reference("images/app:1"),
            "--allow-unsigned",
        ],
        1,
    )
    .stderr_has(&[
        "is not a Wasm component artifact",
        "exactly one `application/wasm` layer; this one has 0",
        "application/vnd.oci.image.layer.v1.tar",
    ]);
    let index = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}","size":{},"platform":{{"architecture":"amd64","os":"linux"}}}}]}}"#,
        sha256_hex(image.as_bytes()),
        image.len()
    );
    push_raw(
        &registry,
        "images/app",
        "multi",
        &[],
        "application/vnd.oci.image.index.v1+json",
        &index,
    );
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &registry.reference("images/app:multi"),
            "--allow-unsigned",
        ],
        1,
    )
    .stderr_has(&[
        "it is a manifest list (1 entries)",
        "install one entry by its digest",
    ]);
}

/// `cordon plugin keygen DIR/NAME`: the private and public key files.
pub(super) fn keygen(home: &TestHome, name: &str) -> (String, String) {
    let prefix = home.scratch("keys").join(name);
    home.cordon(&[
        "plugin",
        "keygen",
        &prefix.display().to_string(),
        "--no-password",
    ])
    .ok()
    .stdout_has(&["not encrypted", "Fingerprint: sha256:"]);
    let path = |ext: &str| format!("{}.{ext}", prefix.display());
    let mode = std::fs::metadata(path("key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the private key is the owner's only");
    (path("key"), path("pub"))
}

/// A manifest as the registry serves it.
pub(super) fn get_manifest(registry: &Registry, repo: &str, reference: &str) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!(
        "http://127.0.0.1:{}/v2/{repo}/manifests/{reference}",
        registry.port
    );
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let response = reqwest::Client::new()
            .get(url)
            .header("Accept", "application/vnd.oci.image.manifest.v1+json")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        response.text().await.unwrap()
    })
}

fn signature_tag(manifest: &str) -> String {
    format!("{}.sig", manifest.replace(':', "-"))
}

#[test]
fn only_a_signature_by_a_trusted_key_of_this_very_manifest_installs() {
    let registry = Registry::start();
    let home = TestHome::new();
    let (alice_key, alice_pub) = keygen(&home, "alice");
    let (mallory_key, _) = keygen(&home, "mallory");
    let tag = registry.reference("plugins/greeter:1");
    let manifest = pushed(&home, &fixture("greeter"), &tag);
    home.cordon(&["trust", "add", &alice_pub])
        .ok()
        .stdout_has(&["Trusting key `alice` (sha256:"]);
    home.cordon(&["trust", "list"])
        .ok()
        .stdout_has(&["alice  sha256:"]);

    // Not signed at all.
    home.fails_unchanged(&["plugin", "install", &tag], 1)
        .stderr_has(&[
            "is not signed",
            &signature_tag(&manifest),
            "--allow-unsigned",
        ]);
    // Signed, by a key the user does not trust.
    home.cordon(&["plugin", "sign", &tag, "--key", &mallory_key])
        .ok()
        .stdout_has(&["Signed", &manifest]);
    home.fails_unchanged(&["plugin", "install", &tag], 1)
        .stderr_has(&[
            "has 1 signature(s), but none is a valid signature of it by a key you trust \
             (trusted: alice)",
        ]);

    // The user may waive the check: the lock and the listing say so.
    let waiving = TestHome::new();
    waiving.cordon(&["trust", "add", &alice_pub]).ok();
    waiving
        .cordon(&["plugin", "install", &tag, "--allow-unsigned"])
        .ok()
        .stdout_has(&["NOT signed by a trusted key"])
        .stderr_has(&[
            "accepted without a trusted signature",
            "none of its 1 signature(s)",
        ]);
    waiving
        .cordon(&["plugin", "list"])
        .ok()
        .stdout_has(&["(unsigned)"]);

    // Alice's genuine signature of another artifact in the same repository, replayed as a
    // signature of this one.
    let other = registry.reference("plugins/greeter:other");
    let other_manifest = pushed(&home, &fixture("noop"), &other);
    home.cordon(&["plugin", "sign", &other, "--key", &alice_key])
        .ok();
    let replayed = get_manifest(
        &registry,
        "plugins/greeter",
        &signature_tag(&other_manifest),
    );
    push_raw(
        &registry,
        "plugins/greeter",
        &signature_tag(&manifest),
        &[],
        "application/vnd.oci.image.manifest.v1+json",
        &replayed,
    );
    home.fails_unchanged(&["plugin", "install", &tag], 1)
        .stderr_has(&[
            "none is a valid signature of it by a key you trust",
            &format!("`alice`'s signature: it signs manifest {other_manifest}, not {manifest}"),
        ]);

    // Alice signs it: accepted, and the lock says by whom. Signing twice adds nothing.
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok()
        .stdout_has(&["Signed"]);
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok()
        .stdout_has(&["already carries a signature"]);
    home.cordon(&["plugin", "install", &tag]).ok().stdout_has(&[
        "signed:  signed by `alice` (sha256:",
        "Installed plugin `greeter`",
    ]);
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(lock.contains("key = \"alice\""), "{lock}");
    assert!(!lock.contains("unsigned"), "{lock}");
    home.cordon(&["plugin", "list"])
        .ok()
        .stdout_has(&["greeter", "(signed by `alice`)"]);
    home.cordon(&["call", "greet", r#"{"name": "Ada"}"#])
        .ok()
        .stdout_has(&["Hello, Ada!"]);
    let audit = home.cordon(&["audit"]).ok();
    assert!(
        audit
            .stdout
            .lines()
            .any(|l| l.contains(" trust ") && l.contains("alice")),
        "{}",
        audit.stdout
    );

    // A key encrypted with a password signs only with it.
    let prefix = home.scratch("keys").join("carol").display().to_string();
    let password = [("CORDON_KEY_PASSWORD", "correct horse battery")];
    home.cordon(&["plugin", "keygen", &prefix])
        .code(2)
        .stderr_has(&[
            "its password is needed: set CORDON_KEY_PASSWORD, or run this on a terminal",
        ]);
    home.cordon_env(&["plugin", "keygen", &prefix], &password)
        .ok()
        .stdout_has(&["encrypted with your password"]);
    let carol_key = format!("{prefix}.key");
    assert!(
        std::fs::read_to_string(&carol_key)
            .unwrap()
            .starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    );
    home.cordon_env(
        &["plugin", "sign", &tag, "--key", &carol_key],
        &[("CORDON_KEY_PASSWORD", "wrong")],
    )
    .code(2)
    .stderr_has(&["cannot be decrypted: the password is wrong"]);
    home.cordon(&["plugin", "sign", &tag, "--key", &carol_key])
        .code(2)
        .stderr_has(&["set CORDON_KEY_PASSWORD"]);
    home.cordon_env(&["plugin", "sign", &tag, "--key", &carol_key], &password)
        .ok()
        .stdout_has(&["Signed"]);

    // A private key others can read is refused, as ssh does.
    let loose = home.scratch("keys").join("loose.key");
    std::fs::copy(&alice_key, &loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    home.cordon(&[
        "plugin",
        "sign",
        &tag,
        "--key",
        &loose.display().to_string(),
    ])
    .code(2)
    .stderr_has(&["other users can read it", "chmod 600"]);
    // A private key is not something to trust.
    home.cordon(&["trust", "add", &alice_key, "--name", "oops"])
        .code(2)
        .stderr_has(&["it is a private key"]);
}

#[test]
fn a_file_or_url_install_may_carry_a_detached_signature() {
    let home = TestHome::new();
    let (alice_key, alice_pub) = keygen(&home, "alice");
    let (mallory_key, _) = keygen(&home, "mallory");
    let component = home.scratch("dist").join("greeter.wasm");
    std::fs::copy(fixture("greeter"), &component).unwrap();
    let file = component.display().to_string();
    let signature = format!("{file}.sig");
    home.cordon(&["plugin", "sign", &file, "--key", &alice_key])
        .ok()
        .stdout_has(&["Wrote the signature"]);
    // Nobody trusted yet: the signature cannot be checked, so nothing installs.
    home.fails_unchanged(&["plugin", "install", &file, "--signature", &signature], 2)
        .stderr_has(&["you trust no keys yet"]);
    home.cordon(&["trust", "add", &alice_pub]).ok();
    // Mallory's signature, and Alice's signature of other bytes, are refused.
    let forged = home.scratch("dist").join("forged.sig");
    home.cordon(&[
        "plugin",
        "sign",
        &file,
        "--key",
        &mallory_key,
        "--output",
        &forged.display().to_string(),
    ])
    .ok();
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &file,
            "--signature",
            &forged.display().to_string(),
        ],
        1,
    )
    .stderr_has(&["none is a valid signature of it by a key you trust (trusted: alice)"]);
    let noop = fixture("noop").display().to_string();
    home.fails_unchanged(&["plugin", "install", &noop, "--signature", &signature], 1)
        .stderr_has(&["none is a valid signature"]);
    home.cordon(&["plugin", "install", &file, "--signature", &signature])
        .ok()
        .stdout_has(&["signed:  signed by `alice`"]);
    home.cordon(&["plugin", "inspect", "greeter"])
        .ok()
        .stdout_has(&["signed:  signed by `alice`"]);

    // From a URL, with the signature published beside it.
    let server = cordon_tests::HttpServer::serve(std::collections::BTreeMap::from([
        (
            "/greeter.wasm".to_string(),
            std::fs::read(&component).unwrap(),
        ),
        (
            "/greeter.wasm.sig".to_string(),
            std::fs::read(&signature).unwrap(),
        ),
        ("/forged.sig".to_string(), std::fs::read(&forged).unwrap()),
    ]));
    let url = server.url("/greeter.wasm");
    let hex = &file_digest(&component)[7..];
    let install_from_url = |signature: &str| {
        vec![
            "plugin".to_string(),
            "install".into(),
            url.clone(),
            "--sha256".into(),
            hex.to_string(),
            "--name".into(),
            "from-url".into(),
            "--signature".into(),
            server.url(signature),
        ]
    };
    let args = install_from_url("/forged.sig");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.fails_unchanged(&args, 1)
        .stderr_has(&["none is a valid signature"]);
    let args = install_from_url("/greeter.wasm.sig");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.cordon(&args)
        .ok()
        .stdout_has(&["signed:  signed by `alice`", "Installed plugin `from-url`"]);
}

#[test]
fn update_follows_the_tag_verifies_and_shows_what_changes_before_asking() {
    let registry = Registry::start();
    let home = TestHome::new();
    let (alice_key, alice_pub) = keygen(&home, "alice");
    home.cordon(&["trust", "add", &alice_pub]).ok();
    let tag = registry.reference("plugins/greeter:stable");
    let v1 = pushed(&home, &fixture("greeter"), &tag);
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok();
    home.cordon(&["plugin", "install", &tag, "--grant", "env:HOME"])
        .ok();
    home.cordon(&["plugin", "install", &fixture("noop").display().to_string()])
        .ok();
    // A second registry plugin whose registry then goes away.
    let gone = Registry::start();
    let gone_tag = gone.reference("plugins/typed:1");
    pushed(&home, &fixture("typed"), &gone_tag);
    home.cordon(&["plugin", "install", &gone_tag, "--allow-unsigned"])
        .ok();
    drop(gone);
    home.fails_unchanged(
        &[
            "plugin",
            "install",
            &gone_tag,
            "--allow-unsigned",
            "--name",
            "again",
        ],
        1,
    )
    .stderr_has(&["registry error for", "plugins/typed:1"]);

    home.cordon(&["plugin", "outdated"]).ok().stdout_has(&[
        "greeter  oci://127.0.0.1:",
        "up to date",
        "typed  oci://127.0.0.1:",
        "unknown: registry error for",
    ]);
    home.cordon(&["plugin", "update", "noop"])
        .code(2)
        .stderr_has(&["not from a registry"]);

    // The tag moves to a release that is not signed yet.
    let v2 = pushed(&home, &fixture("greeter-v2"), &tag);
    home.cordon(&["plugin", "outdated", "greeter"])
        .ok()
        .stdout_has(&[
            &format!("NEW: {} -> {}", &v1[7..19], &v2[7..19]),
            "`cordon plugin update` would refuse it:",
            "is not signed",
        ]);
    home.fails_unchanged(&["plugin", "update", "greeter"], 1)
        .stderr_has(&["is not signed"]);
    let (mallory_key, _) = keygen(&home, "mallory");
    home.cordon(&["plugin", "sign", &tag, "--key", &mallory_key])
        .ok();
    home.fails_unchanged(&["plugin", "update", "greeter"], 1)
        .stderr_has(&["none is a valid signature of it by a key you trust"]);

    // Signed now: the update shows the new imports, the ceiling and the old and new
    // description, and without a terminal or --yes changes nothing.
    home.cordon(&["plugin", "sign", &tag, "--key", &alice_key])
        .ok();
    let before = home.snapshot();
    home.cordon(&["plugin", "outdated", "greeter"])
        .ok()
        .stdout_has(&[
            "NEW: ",
            "+ import  wasi:sockets/tcp",
            "was: Greets someone by name.",
        ]);
    assert_eq!(before, home.snapshot(), "outdated changes nothing");
    let asked = home.fails_unchanged(&["plugin", "update", "greeter"], 2);
    for needle in [
        "signed:  signed by `alice`",
        "!!! WARNING: the new component can use TCP addresses (net:tcp://)",
        "+ import  wasi:sockets/tcp",
        "~ tool    greet: description changed",
        "was: Greets someone by name.",
        "now: Greets someone by name, and tells the greeting service about it.",
        "= grant   env:HOME (kept)",
    ] {
        assert!(
            asked.stdout.contains(needle),
            "lacks {needle:?}:\n{}",
            asked.stdout
        );
    }
    asked.stderr_has(&["--yes"]);

    home.cordon(&["plugin", "update", "greeter", "--yes"])
        .ok()
        .stdout_has(&["Upgraded plugin `greeter`"]);
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(lock.contains(&format!("oci_manifest = \"{v2}\"")), "{lock}");
    assert!(lock.contains("env:HOME"), "{lock}");
    home.cordon(&["plugin", "outdated", "greeter"])
        .ok()
        .stdout_has(&["up to date"]);
    home.cordon(&["plugin", "update", "--all"])
        .code(1)
        .stdout_has(&["`greeter` is up to date."])
        .stderr_has(&["`typed`: not updated", "some updates failed: typed"]);
}

#[test]
fn artifacts_move_both_ways_between_cordon_and_the_oras_sdk() {
    let registry = Registry::start();
    let home = TestHome::new();
    let python = cordon_tests::workspace_root().join("target/venv/bin/python");
    let script = cordon_tests::workspace_root().join("tests/interop/oras_tool.py");
    let port = registry.port;

    // Pushed by oras, as `wkg oci push` lays it out; installed unchanged by Cordon.
    let status = Command::new(&python)
        .arg(&script)
        .args(["push", &format!("127.0.0.1:{port}/interop/greeter:1")])
        .arg(fixture("greeter"))
        .status()
        .expect("the venv's python runs (make test-services installs oras)");
    assert!(status.success());
    home.cordon(&[
        "plugin",
        "install",
        &registry.reference("interop/greeter:1"),
        "--allow-unsigned",
    ])
    .ok();
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(
        lock.contains(&format!(
            "digest = \"{}\"",
            file_digest(&fixture("greeter"))
        )),
        "{lock}"
    );

    // Pushed by Cordon; read back by oras with the expected media types and bytes.
    pushed(
        &home,
        &fixture("noop"),
        &registry.reference("interop/noop:1"),
    );
    let out = home.scratch("oras").join("noop.wasm");
    let read = Command::new(&python)
        .arg(&script)
        .args(["read", &format!("127.0.0.1:{port}/interop/noop:1")])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let manifest: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(fixture("noop")).unwrap()
    );
}

#[test]
fn registry_credentials_go_only_to_the_registry_they_name() {
    let registry = Registry::with_login();
    let home = TestHome::new();
    let tag = registry.reference("private/greeter:1");
    let file = fixture("greeter").display().to_string();
    let host = format!("127.0.0.1:{}", registry.port);
    let login = [
        ("CORDON_REGISTRY_USERNAME", "publisher"),
        ("CORDON_REGISTRY_PASSWORD", REGISTRY_PASSWORD),
    ];
    // Without credentials the registry refuses.
    home.cordon(&["plugin", "push", &file, &tag])
        .code(1)
        .stderr_has(&["registry error for"]);
    // Credentials not said to be for this registry are not sent to it.
    home.cordon_env(&["plugin", "push", &file, &tag], &login)
        .code(1)
        .stderr_has(&["CORDON_REGISTRY is not", "they were not sent to"]);
    let elsewhere = [
        login[0],
        login[1],
        ("CORDON_REGISTRY", "registry.example.com"),
    ];
    home.cordon_env(&["plugin", "push", &file, &tag], &elsewhere)
        .code(1);
    let here = [login[0], login[1], ("CORDON_REGISTRY", host.as_str())];
    home.cordon_env(&["plugin", "push", &file, &tag], &here)
        .ok()
        .stdout_has(&["Pushed"]);
    home.cordon_env(&["plugin", "install", &tag, "--allow-unsigned"], &here)
        .ok();
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(
        !lock.contains(REGISTRY_PASSWORD),
        "credentials are never stored"
    );
}
