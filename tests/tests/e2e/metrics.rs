//! `/metrics` scraped by a real Prometheus (Debian's `prometheus`, started here on 127.0.0.1
//! with a scrape job of its own, as an operator would set one up): what a session did reaches
//! Prometheus with the plugin, tool and outcome of each call, the policy's denial, the
//! sandbox's refusal, the model's requests and tokens and the store's operations; a token
//! without the scope `metrics` is refused.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cordon_scripted_llm::Step;
use cordon_tests::serve::{Served, eventually};
use cordon_tests::support;
use serde_json::{Value, json};

use crate::model::{Model, call};

const OPERATOR: &str = "operator-0123456789abcdef";
const SCRAPER: &str = "scraper-0123456789abcdef";
const ALICE: &str = "alice-0123456789abcdef";

/// Reads run unasked, anything under /secret is denied, the rest is left to the grant-derived
/// default (ask: the probe may write).
const POLICY: &str = r#"
[policy]
rules = [
  { id = "reads", tool = "probe.fs", args = { op = "read" }, decision = "allow" },
  { id = "no-secrets", tool = "probe.fs", args = { path = { prefix = "/secret" } }, decision = "deny", reason = "secrets stay put" },
]
"#;

/// A Prometheus server scraping `target` every second with the token in `token_file`; killed
/// when dropped.
struct Prometheus {
    child: Child,
    url: String,
    rt: tokio::runtime::Runtime,
}

impl Prometheus {
    fn start(dir: &Path, target: &str, token_file: &Path) -> Prometheus {
        let binary = which("prometheus").unwrap_or_else(|| {
            panic!(
                "Prometheus is not installed: `make test` installs Debian's `prometheus` package \
                 (apt-get install prometheus)"
            )
        });
        let port = free_port();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
                 - job_name: cordon\n    authorization:\n      credentials_file: {}\n    \
                 static_configs:\n      - targets: ['{target}']\n",
                token_file.display()
            ),
        )
        .unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    /// The samples of an instant `query`, as (labels, value).
    fn query(&self, query: &str) -> Vec<(Value, f64)> {
        let url =
            url::Url::parse_with_params(&format!("{}/api/v1/query", self.url), [("query", query)])
                .expect("Prometheus' query URL");
        let answer: Value = self.rt.block_on(async {
            let sent = reqwest::Client::new()
                .get(url)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            match sent {
                Ok(response) => response.json().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            }
        });
        answer["data"]["result"]
            .as_array()
            .map(|samples| {
                samples
                    .iter()
                    .map(|s| {
                        let value = s["value"][1].as_str().unwrap_or("nan").parse().unwrap();
                        (s["metric"].clone(), value)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The value of the one sample of `query`, once Prometheus has it at `at_least`.
    fn wait_for(&self, query: &str, at_least: f64) -> f64 {
        eventually(Duration::from_secs(60), query, || {
            let samples = self.query(query);
            match samples.as_slice() {
                [(_, v)] if *v >= at_least => Some(*v),
                _ => None,
            }
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn prometheus_scrapes_what_a_session_did() {
    let (home, data) = support::probe_home(&[]);
    std::fs::write(data.join("note.txt"), "hello").unwrap();
    std::fs::write(home.scratch("serve-cwd").join("cordon.toml"), POLICY).unwrap();
    // A first answer with three calls: a read that runs, one the sandbox refuses (a path
    // that leaves its grant, which no grant request could lift), a read the policy denies.
    // Then a write, which asks (the grant-derived default).
    let model = Model::new(vec![
        Step::tool_calls(vec![
            call("m1", "fs", json!({"op": "read", "path": "/data/note.txt"})),
            call(
                "m2",
                "fs",
                json!({"op": "read", "path": "/data/../../etc/hostname"}),
            ),
            call("m3", "fs", json!({"op": "read", "path": "/secret/key"})),
        ]),
        Step::text("Done."),
        Step::tool_calls(vec![call(
            "w1",
            "fs",
            json!({"op": "write", "path": "/data/out.txt", "content": "x"}),
        )]),
        Step::text("Written."),
    ]);
    let tokens = home.scratch("tokens").join("tokens");
    std::fs::write(
        &tokens,
        format!("{OPERATOR}\nscraper {SCRAPER} metrics\nalice {ALICE}\n"),
    )
    .unwrap();
    let mut served = Served::start(
        &home,
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
        &["--token-file", tokens.to_str().unwrap()],
    );
    served.token = OPERATOR.to_string();
    let refused = served.raw("GET", "/metrics", Some(ALICE), None);
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert!(refused.text.contains("`metrics`"), "{}", refused.text);
    assert_eq!(served.raw("GET", "/metrics", None, None).status, 401);

    for id in ["m", "w"] {
        let created = served.post("/api/v1/sessions", json!({ "id": id }));
        assert_eq!(created.status, 201, "{}", created.text);
    }
    let done = served.post(
        "/api/v1/sessions/m/messages",
        json!({"text": "read them", "stream": false}),
    );
    assert_eq!(done.status, 200, "{}", done.text);

    let scrape_dir = home.scratch("prometheus");
    let scraper_token = scrape_dir.join("token");
    std::fs::write(&scraper_token, SCRAPER).unwrap();
    let prometheus = Prometheus::start(&scrape_dir, &served.addr, &scraper_token);
    prometheus.wait_for(r#"up{job="cordon"}"#, 1.0);

    let calls = |outcome: &str, at_least: f64| {
        let query =
            format!(r#"cordon_tool_calls_total{{plugin="probe",tool="fs",outcome="{outcome}"}}"#);
        prometheus.wait_for(&query, at_least)
    };
    assert_eq!(calls("ok", 1.0), 1.0);
    // All three calls went on record together, so they are scraped together.
    let all = prometheus.query("cordon_tool_calls_total");
    assert_eq!(all.len(), 3, "{all:?}");
    // The plugin met the sandbox's refusal as an error of its own and failed.
    assert_eq!(calls("failed", 1.0), 1.0);
    assert_eq!(
        calls("not_run", 1.0),
        1.0,
        "the policy's denial did not run"
    );
    let probe = r#"{plugin="probe",tool="fs"}"#;
    assert_eq!(
        prometheus.wait_for(&format!("cordon_policy_denials_total{probe}"), 1.0),
        1.0
    );
    assert!(prometheus.wait_for(&format!("cordon_sandbox_refusals_total{probe}"), 1.0) >= 1.0);
    // Two calls ran in the sandbox (the read and the refused one), each timed.
    let timed = format!("cordon_tool_call_duration_seconds_count{probe}");
    assert_eq!(prometheus.wait_for(&timed, 2.0), 2.0);
    // The turn asked the model twice: for the calls, then for the answer.
    let asked = r#"cordon_model_request_duration_seconds_count{outcome="ok"}"#;
    assert_eq!(prometheus.wait_for(asked, 2.0), 2.0);
    let statements = r#"cordon_store_operation_duration_seconds_count{backend="sqlite"}"#;
    assert!(prometheus.wait_for(statements, 1.0) > 1.0);

    // A turn waiting for a person: one session active, one question waiting, until answered.
    let events = served.stream("/api/v1/sessions/w/messages", json!({"text": "write"}));
    events.until("approval_needed", Duration::from_secs(60));
    assert_eq!(prometheus.wait_for("cordon_approvals_waiting", 1.0), 1.0);
    assert_eq!(prometheus.wait_for("cordon_sessions_active", 1.0), 1.0);
    let question = served.pending("w");
    served.answer(&question, "yes");
    events.until("turn_finished", Duration::from_secs(60));
    assert_eq!(
        prometheus.wait_for("cordon_approval_answer_seconds_count", 1.0),
        1.0
    );
    assert_eq!(calls("ok", 2.0), 2.0);
    let waiting = eventually(Duration::from_secs(60), "no question waiting", || {
        let now = prometheus.query("cordon_approvals_waiting");
        (now.len() == 1 && now[0].1 == 0.0).then_some(now)
    });
    assert_eq!(waiting.len(), 1);
}
