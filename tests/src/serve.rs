//! Running `cordon serve` as a user would: the real binary on 127.0.0.1, its token from the
//! token file, its API over HTTP, its turns followed as Server-Sent Events, and stopped by a
//! signal (SIGTERM) or killed outright (SIGKILL) to prove nothing acknowledged is lost.

use std::io::{BufRead, BufReader};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;

use crate::TestHome;

/// A running `cordon serve`, or a client of one started elsewhere ([`Served::at`]: a load
/// balancer in front of several).
pub struct Served {
    child: Option<Child>,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The bearer token.
    pub token: String,
    stderr: Arc<Mutex<String>>,
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
}

/// An HTTP answer: the status and the body as JSON (`Value::Null` when it is not JSON; the
/// text is kept in `text`).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body, parsed.
    pub json: Value,
    /// The body as text.
    pub text: String,
}

impl Served {
    /// Starts `cordon serve --listen 127.0.0.1:0 <args>` on `home` with `env`, and waits until
    /// it listens.
    pub fn start(home: &TestHome, env: &[(&str, &str)], args: &[&str]) -> Served {
        let mut command = home.cordon_command(&["serve", "--listen", "127.0.0.1:0"]);
        command
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "cordon=info,cordon_serve=info,warn")
            .current_dir(home.scratch("serve-cwd"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start cordon serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = mpsc::channel();
        let pipe = child.stderr.take().expect("stderr is piped");
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or_default();
                    let _ = addr_tx.send(addr.to_string());
                }
                let mut all = keep.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        let addr = match addr_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "cordon serve did not start listening:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        let token = std::fs::read_to_string(home.path().join("serve-token"))
            .map(|t| t.trim().to_string())
            .unwrap_or_default();
        let mut served = Served::at(&addr, &token);
        served.child = Some(child);
        served.stderr = stderr;
        served
    }

    /// A client of the server (or load balancer) at `addr` (`127.0.0.1:PORT`) with `token`;
    /// nothing to stop.
    pub fn at(addr: &str, token: &str) -> Served {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("http client");
        Served {
            child: None,
            addr: addr.to_string(),
            token: token.to_string(),
            stderr: Arc::default(),
            rt,
            client,
        }
    }

    /// Everything the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .expect("a server this test started")
            .id()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A request with the token, `body` sent as is (so tests can send what is not JSON).
    pub fn raw(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Answer {
        self.try_raw(method, path, token, body)
            .expect("send a request to cordon serve")
    }

    /// An MCP message to `/mcp` (JSON answers), in MCP session `session` if given: the
    /// answer, and the session the answer names (`Mcp-Session-Id`).
    pub fn mcp(&self, session: Option<&str>, message: Value) -> (Answer, Option<String>) {
        self.mcp_with(session, message, &[])
    }

    /// [`Served::mcp`] with more headers (a client's `traceparent`).
    pub fn mcp_with(
        &self,
        session: Option<&str>,
        message: Value,
        headers: &[(&str, &str)],
    ) -> (Answer, Option<String>) {
        let mut request = self
            .client
            .post(self.url("/mcp"))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(message.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.rt.block_on(async {
            let response = request.send().await.expect("send a request to /mcp");
            let status = response.status().as_u16();
            let named = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let text = response.text().await.unwrap_or_default();
            // A JSON body, or an event stream whose last JSON event is the answer.
            let json = serde_json::from_str(&text).unwrap_or_else(|_| {
                text.lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                    .next_back()
                    .unwrap_or(Value::Null)
            });
            (Answer { status, json, text }, named)
        })
    }

    /// `POST path` with the token and a JSON body; `Err` when no answer came (the connection
    /// broke: the host died while it had the request).
    pub fn try_post(&self, path: &str, body: Value) -> Result<Answer, reqwest::Error> {
        self.try_raw("POST", path, Some(&self.token), Some(&body.to_string()))
    }

    fn try_raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Result<Answer, reqwest::Error> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.client.request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        self.rt.block_on(async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let text = response.text().await?;
            let json = serde_json::from_str(&text).unwrap_or(Value::Null);
            Ok(Answer { status, json, text })
        })
    }

    /// The status of `GET path` sent with another `Host` header (as a page reaching the server
    /// through a name of its own would).
    pub fn raw_with_host(&self, path: &str, host: &str) -> u16 {
        let request = self
            .client
            .get(self.url(path))
            .header(reqwest::header::HOST, host);
        self.rt.block_on(async {
            let response = request
                .send()
                .await
                .expect("send a request to cordon serve");
            response.status().as_u16()
        })
    }

    /// `GET path` with the token.
    pub fn get(&self, path: &str) -> Answer {
        self.raw("GET", path, Some(&self.token), None)
    }

    /// `POST path` with the token and a JSON body.
    pub fn post(&self, path: &str, body: Value) -> Answer {
        self.raw("POST", path, Some(&self.token), Some(&body.to_string()))
    }

    /// The first question session `session` waits on, once it waits (at most a minute).
    pub fn pending(&self, session: &str) -> Value {
        eventually(Duration::from_secs(60), "an approval question", || {
            self.get("/api/v1/approvals").json["pending"]
                .as_array()?
                .iter()
                .find(|p| p["session"] == session)
                .cloned()
        })
    }

    /// Answers `question` (as the approvals API lists it) with `answer` (`yes`, `no`,
    /// `always`, `never`), asserting the API took it.
    #[track_caller]
    pub fn answer(&self, question: &Value, answer: &str) {
        let answered = self.post(
            &format!(
                "/api/v1/approvals/{}/{}",
                question["session"].as_str().expect("a question's session"),
                question["call_id"].as_str().expect("a question's call id")
            ),
            serde_json::json!({ "answer": answer }),
        );
        assert_eq!(answered.status, 200, "{}", answered.text);
    }

    /// `DELETE path` with the token.
    pub fn delete(&self, path: &str) -> Answer {
        self.raw("DELETE", path, Some(&self.token), None)
    }

    /// `POST path` with the token, following the answer as Server-Sent Events.
    pub fn stream(&self, path: &str, body: Value) -> Events {
        self.stream_with(path, body, &[])
    }

    /// [`Served::stream`] with more headers (a client's `traceparent`).
    pub fn stream_with(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> Events {
        let mut request = self
            .client
            .post(self.url(path))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.follow(request)
    }

    /// `POST path` with the token, a JSON body and more headers (a client's `traceparent`).
    pub fn post_with(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> Answer {
        let mut request = self
            .client
            .post(self.url(path))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.rt.block_on(async {
            let response = request
                .send()
                .await
                .expect("send a request to cordon serve");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            let json = serde_json::from_str(&text).unwrap_or(Value::Null);
            Answer { status, json, text }
        })
    }

    /// `GET path` with the token, followed as Server-Sent Events.
    pub fn follow_get(&self, path: &str) -> Events {
        let request = self.client.get(self.url(path)).bearer_auth(&self.token);
        self.follow(request)
    }

    fn follow(&self, request: reqwest::RequestBuilder) -> Events {
        let (tx, rx) = mpsc::channel();
        let status = self.rt.block_on(async {
            let response = request
                .send()
                .await
                .expect("send a request to cordon serve");
            let status = response.status().as_u16();
            let mut body = response.bytes_stream();
            tokio::spawn(async move {
                let mut buffer = String::new();
                while let Some(Ok(chunk)) = body.next().await {
                    buffer.push_str(&String::from_utf8_lossy(&chunk));
                    while let Some(cut) = buffer.find("\n\n") {
                        let block: String = buffer.drain(..cut + 2).collect();
                        let data: Vec<&str> = block
                            .lines()
                            .filter_map(|l| l.strip_prefix("data:"))
                            .map(str::trim_start)
                            .collect();
                        if data.is_empty() {
                            continue;
                        }
                        let event = serde_json::from_str(&data.join("\n")).unwrap_or(Value::Null);
                        if tx.send(event).is_err() {
                            return;
                        }
                    }
                }
            });
            status
        });
        Events { status, rx }
    }

    /// Stops the server with SIGTERM and waits for it (bounded).
    pub fn terminate(mut self, within: Duration) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("a server this test started");
        // SAFETY: sends a signal to our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_for_exit(&mut child, within);
        std::thread::sleep(Duration::from_millis(100));
        (status, self.stderr())
    }

    /// Kills the server outright (SIGKILL), as a crash would.
    pub fn kill9(mut self) -> String {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stderr()
    }
}

fn wait_for_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait for cordon serve") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cordon serve did not stop within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The events of a followed stream, as they arrive.
pub struct Events {
    /// The response's status.
    pub status: u16,
    rx: mpsc::Receiver<Value>,
}

impl Events {
    /// The next event, if one arrives within `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<Value> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Events up to and including the first of type `kind`; panics after `timeout`, showing
    /// what came.
    pub fn until(&self, kind: &str, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(event) => {
                    let done = event["type"] == kind;
                    seen.push(event);
                    if done {
                        return seen;
                    }
                }
                Err(_) => panic!("no `{kind}` event within {timeout:?}; got {seen:#?}"),
            }
        }
    }
}

/// Polls `check` until it gives something, for at most `timeout`.
pub fn eventually<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
