//! A real OpenID provider for tests and benchmarks: the certified `oidc-provider` npm package
//! (installed by `make test` into `target/npm-oidc`), run with `tests/oidc/provider.mjs` on
//! 127.0.0.1.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::{target_dir, workspace_root};

/// The provider, killed when dropped.
pub struct Provider {
    child: Child,
    port: u16,
    rt: tokio::runtime::Runtime,
}

impl Provider {
    /// Starts the provider on `port` signing with a fresh key named `kid`.
    pub fn start(port: u16, kid: &str) -> Provider {
        let modules = target_dir().join("npm-oidc");
        assert!(
            modules.join("node_modules/oidc-provider").is_dir(),
            "oidc-provider is not installed in {}: `make test` installs it (npm install --prefix \
             target/npm-oidc oidc-provider@9.13.3)",
            modules.display()
        );
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Node finds an ES module's packages from the module's own folder.
        let script = modules.join("provider.mjs");
        std::fs::copy(workspace_root().join("tests/oidc/provider.mjs"), &script).unwrap();
        let mut child = Command::new("node")
            .arg(&script)
            .args([&port.to_string(), kid])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        while !line.contains("listening on") {
            line.clear();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("the OpenID provider did not start");
            }
        }
        Provider {
            child,
            port,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An access token from the client-credentials grant of `client` for `resource`, with
    /// `scope` (none: the claim is left out).
    pub fn token(&self, client: &str, resource: &str, scope: Option<&str>) -> String {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials")
            .append_pair("resource", resource);
        if let Some(scope) = scope {
            form.append_pair("scope", scope);
        }
        let form = form.finish();
        let url = format!("{}/token", self.issuer());
        let answer: Value = self.rt.block_on(async {
            reqwest::Client::new()
                .post(url)
                .basic_auth(client, Some(format!("{client}-secret")))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .expect("ask the provider for a token")
                .json()
                .await
                .expect("a token answer")
        });
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {answer}"))
            .to_string()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
