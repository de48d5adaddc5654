//! Plugins from an OCI registry: a real registry (Debian's `docker-registry`, the CNCF
//! distribution registry) on 127.0.0.1 with its storage in a temporary directory; `cordon
//! plugin push`, installs by tag and by digest pinned in the lock, and refusals that leave the
//! home unchanged: no signature check waived, a tampered layer, a digest the registry does not
//! have, a manifest that is not a Wasm component artifact.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cordon_tests::{TestHome, file_digest, fixture};

/// A registry serving from a temporary directory until dropped.
struct Registry {
    child: Child,
    storage: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
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
                 delete: {{enabled: true}}\nhttp: {{addr: 127.0.0.1:{port}}}\n",
                storage.display()
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

    fn reference(&self, rest: &str) -> String {
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
fn push_raw(
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

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The manifest digest `cordon plugin push` printed.
fn pushed(home: &TestHome, file: &Path, reference: &str) -> String {
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

    // Registry plugins need a signature check, or the user's explicit waiver.
    home.fails_unchanged(&["plugin", "install", &tag], 2)
        .stderr_has(&["comes from a registry", "--allow-unsigned"]);
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
    // Someone with access to the registry's storage swaps the component's bytes.
    let layer = registry.blob(&file_digest(&fixture("noop")));
    let mut bytes = std::fs::read(&layer).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&layer, bytes).unwrap();
    home.fails_unchanged(&["plugin", "install", &tag, "--allow-unsigned"], 1)
        .stderr_has(&[
            "digest mismatch for the component layer of oci://127.0.0.1:",
            &format!("expected {}", file_digest(&fixture("noop"))),
        ]);

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
