//! Registries that misbehave on purpose, served by the test on 127.0.0.1: bodies far larger
//! than Cordon reads (announced or not; manifests, blobs, error bodies, token responses), bytes
//! trickled to hold a command forever, and token services elsewhere that would collect the
//! user's registry credentials. Cordon stops at its caps and deadline, names them, goes on with
//! the other registries, and sends credentials to the registry's own host only.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_tests::fake_registry::{Body, FakeRegistry, Request, Response};
use cordon_tests::{TestHome, fixture};

use super::cli_oci::{Registry, pushed, sha256_hex};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// 32 times the largest manifest Cordon reads; streamed by the server, never held.
const HUGE: u64 = 128 << 20;

/// A component artifact laid out as Cordon pushes one, for a fake registry to serve.
struct Artifact {
    manifest: Vec<u8>,
    config: Vec<u8>,
    layer: Vec<u8>,
}

impl Artifact {
    fn of(component: &Path) -> Artifact {
        let layer = std::fs::read(component).unwrap();
        let config = br#"{"architecture":"wasm","os":"wasip2"}"#.to_vec();
        let manifest = Artifact::manifest_for(
            &config,
            &format!("sha256:{}", sha256_hex(&layer)),
            layer.len(),
        );
        Artifact {
            manifest,
            config,
            layer,
        }
    }

    fn manifest_for(config: &[u8], layer_digest: &str, layer_size: usize) -> Vec<u8> {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.wasm.config.v0+json","digest":"sha256:{}","size":{}}},"layers":[{{"mediaType":"application/wasm","digest":"{layer_digest}","size":{layer_size}}}]}}"#,
            sha256_hex(config),
            config.len()
        )
        .into_bytes()
    }

    /// The registry API for this artifact at `repo:tag`: its manifest by tag or digest, and its
    /// blobs; 404 for anything else (so it has no signatures).
    fn answer(&self, repo: &str, tag: &str, request: &Request) -> Response {
        let digest = |bytes: &[u8]| format!("sha256:{}", sha256_hex(bytes));
        let path = request.path();
        let manifests = [
            format!("/v2/{repo}/manifests/{tag}"),
            format!("/v2/{repo}/manifests/{}", digest(&self.manifest)),
        ];
        if manifests.iter().any(|m| m == path) {
            return Response::ok(self.manifest.clone()).with_header("Content-Type", OCI_MANIFEST);
        }
        for blob in [&self.config, &self.layer] {
            if path == format!("/v2/{repo}/blobs/{}", digest(blob)) {
                return Response::ok(blob.clone());
            }
        }
        Response::status(404)
    }
}

/// `plugin install REFERENCE --allow-unsigned` with `env`, which must fail with status 1 and
/// change nothing in the home.
fn install_fails(home: &TestHome, reference: &str, env: &[(&str, &str)]) -> cordon_tests::Run {
    let before = home.snapshot();
    let run = home
        .cordon_env(&["plugin", "install", reference, "--allow-unsigned"], env)
        .code(1);
    assert_eq!(before, home.snapshot(), "a failed install changed the home");
    run
}

#[test]
fn a_registry_cannot_make_cordon_read_more_than_its_caps() {
    let small = b"a small layer".to_vec();
    let config = br#"{}"#.to_vec();
    let blob_manifest = Artifact::manifest_for(
        &config,
        &format!("sha256:{}", sha256_hex(&small)),
        small.len(),
    );
    let registry = FakeRegistry::start(move |request| {
        let filler = |announced| Body::Filler {
            announced,
            total: HUGE,
        };
        match request.path() {
            "/v2/huge/announced/manifests/1" => Response::new(200, filler(Some(HUGE))),
            "/v2/huge/streamed/manifests/1" => Response::new(200, filler(None)),
            "/v2/huge/error/manifests/1" => Response::new(500, filler(None)),
            "/v2/huge/blob/manifests/1" => Response::ok(blob_manifest.clone()),
            p if p.starts_with("/v2/huge/blob/blobs/") => Response::new(200, filler(None)),
            _ => Response::status(404),
        }
    });
    // This one wants a token for everything, and its token service answers without end.
    let tokens = FakeRegistry::start(|request| {
        if request.path() == "/token" {
            return Response::new(
                200,
                Body::Filler {
                    announced: None,
                    total: HUGE,
                },
            );
        }
        let host = request.header("host").unwrap_or_default();
        let challenge = format!(r#"Bearer realm="http://{host}/token",service="fake""#);
        Response::status(401).with_header("WWW-Authenticate", &challenge)
    });
    let token_words = format!(
        "the token response of http://{} is larger than 65536 bytes",
        tokens.host()
    );
    let home = TestHome::new();
    for (registry, repo, cap) in [
        (
            &registry,
            "announced",
            "is larger than 4194304 bytes, the most Cordon reads of it (the registry announced 134217728 bytes; none were read)",
        ),
        (
            &registry,
            "streamed",
            "is larger than 4194304 bytes, the most Cordon reads of it (the registry sent more; Cordon stopped reading at 4194304 bytes)",
        ),
        (
            &registry,
            "error",
            "answered 500 Internal Server Error to the request for manifest `1` (its error body is larger than 65536 bytes",
        ),
        (&tokens, "token", &token_words),
        (
            &registry,
            "blob",
            "the component layer is larger than 13 bytes, the most Cordon reads of it",
        ),
    ] {
        let before = registry.body_bytes_sent();
        let reference = format!("oci://{}/huge/{repo}:1", registry.host());
        let home_before = home.snapshot();
        let run = home.cordon(&["plugin", "install", &reference, "--allow-unsigned"]);
        let sent = registry.body_bytes_sent() - before;
        // What a socket's buffers take beyond the cap, not the whole body.
        assert!(
            sent < HUGE / 4,
            "{repo}: Cordon took {sent} bytes of the body"
        );
        run.code(1)
            .stderr_has(&[&format!("registry error for {reference}"), cap]);
        assert_eq!(
            home_before,
            home.snapshot(),
            "a failed install changed the home"
        );
    }
}

#[test]
fn a_trickling_registry_is_given_up_at_the_deadline() {
    let artifact = Artifact::of(&fixture("noop"));
    let layer_size = artifact.layer.len() as u64;
    let registry = FakeRegistry::start(move |request| {
        if request.path().contains("/blobs/") {
            // 10 s at most, then the connection closes.
            Response::new(
                200,
                Body::Trickle {
                    announced: layer_size,
                    count: 40,
                    every: Duration::from_millis(250),
                },
            )
        } else {
            artifact.answer("plugins/slow", "1", request)
        }
    });
    let home = TestHome::new();
    let reference = format!("oci://{}/plugins/slow:1", registry.host());
    install_fails(&home, &reference, &[("CORDON_REGISTRY_TIMEOUT", "2s")]).stderr_has(&[
        &format!("{} did not finish within 2s", registry.host()),
        "set CORDON_REGISTRY_TIMEOUT",
    ]);
    home.cordon_env(
        &["plugin", "install", &reference, "--allow-unsigned"],
        &[("CORDON_REGISTRY_TIMEOUT", "soon")],
    )
    .code(2)
    .stderr_has(&["CORDON_REGISTRY_TIMEOUT=`soon` cannot be used", "90s"]);
}

#[test]
fn outdated_and_update_report_a_slow_registry_and_go_on_with_the_others() {
    let good = Registry::start();
    let home = TestHome::new();
    let greeter = good.reference("plugins/greeter:1");
    pushed(&home, &fixture("greeter"), &greeter);
    home.cordon(&["plugin", "install", &greeter, "--allow-unsigned"])
        .ok();
    // A registry that serves its artifact, then turns slow. Its plugin comes first.
    let artifact = Artifact::of(&fixture("typed"));
    let slow = Arc::new(AtomicBool::new(false));
    let registry = {
        let slow = slow.clone();
        FakeRegistry::start(move |request| {
            if slow.load(Ordering::SeqCst) {
                Response::new(
                    200,
                    Body::Trickle {
                        announced: 4096,
                        count: 40,
                        every: Duration::from_millis(250),
                    },
                )
            } else {
                artifact.answer("plugins/typed", "1", request)
            }
        })
    };
    let dawdler = format!("oci://{}/plugins/typed:1", registry.host());
    home.cordon(&[
        "plugin",
        "install",
        &dawdler,
        "--allow-unsigned",
        "--name",
        "dawdler",
    ])
    .ok();
    slow.store(true, Ordering::SeqCst);

    let deadline = [("CORDON_REGISTRY_TIMEOUT", "2s")];
    let given_up = format!("{} did not finish within 2s", registry.host());
    home.cordon_env(&["plugin", "outdated"], &deadline)
        .ok()
        .stdout_has(&[
            &format!("dawdler  {dawdler}  unknown: registry error for {dawdler}"),
            &given_up,
            "greeter  oci://127.0.0.1:",
            "up to date",
        ]);
    home.cordon_env(&["plugin", "update", "--all"], &deadline)
        .code(1)
        .stdout_has(&["`greeter` is up to date."])
        .stderr_has(&[
            "`dawdler`: not updated",
            &given_up,
            "some updates failed: dawdler",
        ]);
}

#[test]
fn registry_credentials_never_follow_a_token_realm_to_another_host_or_plain_http() {
    let artifact = Artifact::of(&fixture("greeter"));
    let realm = Arc::new(Mutex::new(String::new()));
    let registry = {
        let realm = realm.clone();
        FakeRegistry::start(move |request| {
            if request.path() == "/token" {
                return Response::ok(r#"{"token":"from-the-registry-host"}"#);
            }
            if !request
                .header("authorization")
                .is_some_and(|a| a.starts_with("Bearer "))
            {
                let challenge =
                    format!(r#"Bearer realm="{}",service="fake""#, realm.lock().unwrap());
                return Response::status(401).with_header("WWW-Authenticate", &challenge);
            }
            artifact.answer("private/greeter", "1", request)
        })
    };
    // A token service on another port, which is also a proxy for plain-HTTP requests.
    let elsewhere = FakeRegistry::start(|_| Response::ok(r#"{"token":"from-elsewhere"}"#));
    let home = TestHome::new();
    let docker = home.scratch("docker").display().to_string();
    let proxy = format!("http://{}", elsewhere.host());
    let host = registry.host();
    let env = [
        ("CORDON_REGISTRY_USERNAME", "publisher"),
        ("CORDON_REGISTRY_PASSWORD", "registry-secret"),
        ("CORDON_REGISTRY", host.as_str()),
        ("DOCKER_CONFIG", docker.as_str()),
        ("http_proxy", proxy.as_str()),
        ("HTTP_PROXY", proxy.as_str()),
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("no_proxy", "127.0.0.1,localhost"),
    ];
    let reference = format!("oci://{host}/private/greeter:1");
    let install = |name: &str| {
        home.cordon_env(
            &[
                "plugin",
                "install",
                &reference,
                "--allow-unsigned",
                "--name",
                name,
                "--yes",
            ],
            &env,
        )
    };
    let basic_to = |server: &FakeRegistry| {
        server
            .requests()
            .iter()
            .filter(|r| {
                r.header("authorization")
                    .is_some_and(|a| a.starts_with("Basic "))
            })
            .count()
    };

    // The registry's own token service gets the credentials.
    *realm.lock().unwrap() = format!("http://{host}/token");
    install("same-host").ok();
    assert!(
        basic_to(&registry) > 0,
        "the registry's own token service got no credentials"
    );

    // One on another port is asked anonymously; the user is told why.
    *realm.lock().unwrap() = format!("http://{}/token", elsewhere.host());
    let run = install("other-port");
    assert_eq!(basic_to(&elsewhere), 0, "credentials went to another port");
    assert!(
        !elsewhere.requests().is_empty(),
        "the other token service was not asked"
    );
    run.ok().stderr_has(&[&format!(
        "the credentials for {host} were not sent to the token service at http://{}",
        elsewhere.host()
    )]);

    // One on another machine over plain HTTP (reached through the proxy, if at all) is not
    // contacted.
    *realm.lock().unwrap() = "http://auth.example.test/token".into();
    let asked = elsewhere.requests().len();
    let before = home.snapshot();
    let run = install("plain-http");
    assert_eq!(basic_to(&elsewhere), 0, "credentials went over plain HTTP");
    assert_eq!(
        elsewhere.requests().len(),
        asked,
        "the plain-HTTP realm was contacted"
    );
    run.code(1)
        .stderr_has(&["sends Cordon to http://auth.example.test for a token over plain HTTP"]);
    assert_eq!(before, home.snapshot(), "a failed install changed the home");
}
