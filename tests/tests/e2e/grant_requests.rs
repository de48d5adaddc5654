//! Grant requests: a call its sandbox refused something a grant would allow becomes a question
//! to a person. The `probe` fixture is granted one local server and the model fetches from
//! another; the refusal names that origin, a person grants it (for this call, or for a while),
//! and the call runs again with it. Where nobody can answer, the model gets the refusal.

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_scripted_llm::Step;
use cordon_tests::serve::Served;
use cordon_tests::{HttpServer, TestHome, fixture};
use serde_json::json;

use crate::model::{Model, call};

/// A home with `probe` granted `granted` only, allowed to run unasked; and another server the
/// model will fetch from.
fn setup() -> (TestHome, HttpServer, HttpServer, std::path::PathBuf) {
    let home = TestHome::new();
    let granted = HttpServer::serve(BTreeMap::from([("/a".to_string(), b"from a".to_vec())]));
    let page = b"the other server's page".to_vec();
    let other = HttpServer::serve(BTreeMap::from([
        ("/b".to_string(), page.clone()),
        ("/c".to_string(), page.clone()),
        ("/d".to_string(), page),
    ]));
    home.cordon(&[
        "plugin",
        "install",
        fixture("probe").to_str().unwrap(),
        "--grant",
        &format!("net:{}", granted.origin()),
    ])
    .ok();
    let config = home.scratch("cfg").join("cordon.toml");
    std::fs::write(&config, "[approval.tools]\n\"probe.http\" = \"auto\"\n").unwrap();
    (home, granted, other, config)
}

/// `cordon serve` on `home` in front of `model`, with `env` besides the model's, and `config`.
fn serve(
    home: &TestHome,
    model: &Model,
    env: &[(&str, &str)],
    config: Option<&std::path::Path>,
) -> Served {
    let url = model.url();
    let mut all = vec![
        ("CORDON_LLM_URL", url.as_str()),
        ("CORDON_MODEL", "scripted"),
    ];
    all.extend_from_slice(env);
    let config = config.map(|c| c.to_str().unwrap());
    let args: Vec<&str> = config.into_iter().flat_map(|c| ["--config", c]).collect();
    Served::start(home, &all, &args)
}

fn fetch(id: &str, url: &str) -> cordon_scripted_llm::ScriptedCall {
    call(id, "http", json!({ "url": url }))
}

#[test]
fn with_nobody_to_ask_the_model_gets_the_refusal_and_nothing_is_granted() {
    let (home, _granted, other, config) = setup();
    let model = Model::new(vec![
        Step::tool_calls(vec![fetch("f1", &other.url("/b"))]),
        Step::text("Could not."),
    ]);
    home.cordon_at(
        Some(&home.scratch("cwd")),
        &[
            "run",
            "Fetch it",
            "--config",
            config.to_str().unwrap(),
            "--approve",
            "all",
        ],
        "",
        &[
            ("CORDON_LLM_URL", &model.url()),
            ("CORDON_MODEL", "scripted"),
        ],
    )
    .ok();
    let result = model.result(1, "f1");
    assert!(
        result.contains("nobody was asked to grant")
            && result.contains(&format!("net:{}", other.origin())),
        "{result}"
    );
    assert!(other.asked().is_empty(), "{:?}", other.asked());
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains(&other.origin()), "{lock}");
}

#[test]
fn over_the_api_a_person_grants_an_origin_for_a_while_and_the_call_runs_again() {
    let (home, _granted, other, config) = setup();
    let model = Model::new(vec![
        Step::tool_calls(vec![fetch("f1", &other.url("/b"))]),
        Step::text("Fetched."),
        // A second turn: the grant is in the lock now, so no question.
        Step::tool_calls(vec![fetch("f2", &other.url("/b"))]),
        Step::text("Again."),
    ]);
    let served = serve(&home, &model, &[], Some(&config));
    let created = served.post("/api/v1/sessions", json!({"id": "ann"}));
    assert_eq!(created.status, 201, "{}", created.text);
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Fetch it"}));
    let question = served.pending("ann");
    let wanted = format!("net:{}", other.origin());
    assert_eq!(question["requested_grants"], json!([wanted]), "{question}");
    assert!(
        question["reason"].as_str().unwrap().contains("refused"),
        "{question}"
    );
    // `for` answers grant requests only; a made-up length is refused with what to type.
    let bad = served.post(
        &format!(
            "/api/v1/approvals/ann/{}",
            question["call_id"].as_str().unwrap()
        ),
        json!({"answer": "for ever and ever"}),
    );
    assert_eq!(bad.status, 400, "{}", bad.text);
    served.answer(&question, "for 30m");
    events.until("turn_finished", Duration::from_secs(60));
    assert!(
        model.result(1, "f1").contains("the other server's page"),
        "{}",
        model.result(1, "f1")
    );
    assert_eq!(other.asked(), ["/b"]);
    // The lock keeps it with its end; `plugin inspect` shows the time left.
    let inspect = home.cordon(&["plugin", "inspect", "probe"]).ok();
    assert!(
        inspect.stdout.contains("for a while:")
            && inspect.stdout.contains(&wanted)
            && inspect.stdout.contains("left"),
        "{}",
        inspect.stdout
    );
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Again"}));
    events.until("turn_finished", Duration::from_secs(60));
    assert!(model.result(3, "f2").contains("the other server's page"));
    assert_eq!(other.asked(), ["/b", "/b"]);
    served.terminate(Duration::from_secs(30));
    let audit = home.cordon(&["audit"]).ok();
    assert!(
        audit.stdout.contains(&wanted) && audit.stdout.contains("for 30 minutes"),
        "{}",
        audit.stdout
    );
    // Revoked like any grant.
    home.cordon(&["revoke", "probe", &wanted]).ok();
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains(&other.origin()), "{lock}");
}

#[test]
fn a_grant_for_this_call_only_is_asked_again_next_time_and_never_is_remembered() {
    let (home, _granted, other, config) = setup();
    let model = Model::new(vec![
        Step::tool_calls(vec![fetch("f1", &other.url("/b"))]),
        // Other pages: the same call three times would stop the turn for lack of progress.
        Step::tool_calls(vec![fetch("f2", &other.url("/c"))]),
        Step::tool_calls(vec![fetch("f3", &other.url("/d"))]),
        Step::text("Done."),
    ]);
    let served = serve(&home, &model, &[], Some(&config));
    served.post("/api/v1/sessions", json!({"id": "bob"}));
    let events = served.stream("/api/v1/sessions/bob/messages", json!({"text": "Fetch"}));
    let first = served.pending("bob");
    // Answered from a terminal with `cordon approve`, which shows what would be granted.
    let listed = home.cordon(&["approve", "--list"]).ok();
    assert!(
        listed.stdout.contains("refused by its sandbox")
            && listed.stdout.contains(&format!("net:{}", other.origin())),
        "{}",
        listed.stdout
    );
    home.cordon(&["approve", "bob", first["call_id"].as_str().unwrap(), "yes"])
        .ok();
    let second = crate::grant_requests::next_question(&served, "bob", &first);
    served.answer(&second, "never");
    events.until("turn_finished", Duration::from_secs(60));
    assert!(model.result(1, "f1").contains("the other server's page"));
    let refused = model.result(2, "f2");
    assert!(refused.contains("will not be asked again"), "{refused}");
    // Refused for good in this conversation: the third fetch fails without a question.
    assert!(!model.result(3, "f3").contains("the other server's page"));
    assert_eq!(other.asked(), ["/b"]);
    served.terminate(Duration::from_secs(30));
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains(&other.origin()), "{lock}");
}

/// The question of `session` waiting after `earlier` was answered.
pub(crate) fn next_question(
    served: &Served,
    session: &str,
    earlier: &serde_json::Value,
) -> serde_json::Value {
    cordon_tests::serve::eventually(Duration::from_secs(60), "the next question", || {
        served.get("/api/v1/approvals").json["pending"]
            .as_array()?
            .iter()
            .find(|p| p["session"] == session && p["call_id"] != earlier["call_id"])
            .cloned()
    })
}

/// A path outside every directory the plugin was granted fails inside the plugin, where the
/// host cannot see it: the `files` plugin says which directory it lacked
/// (`cordon:tool/grant-wanted`), a person grants it for the call, and the read runs again.
/// What a plugin says is untrusted: a directory holding Cordon's own state is never offered.
#[test]
fn a_file_outside_every_grant_becomes_a_request_for_its_directory() {
    let home = TestHome::new();
    let data = home.scratch("data");
    let other = std::fs::canonicalize(home.scratch("other")).unwrap();
    std::fs::write(other.join("notes.txt"), "the notes outside /data").unwrap();
    cordon_tests::support::install(
        &home,
        "files",
        &[cordon_tests::support::grant_fs(&data, "/data", "ro")],
        &[],
    );
    // As the lock writes a resolved grant: with the path the plugin sees it at.
    let wanted = format!("fs:{0}:{0}:ro", other.display());
    let path = other.join("notes.txt").display().to_string();
    let lock_path = home.path().join("plugins.toml").display().to_string();
    let model = Model::new(vec![
        // The home: the plugin says it lacked it, and nobody is asked.
        Step::tool_calls(vec![call("r0", "read_file", json!({ "path": lock_path }))]),
        Step::tool_calls(vec![call("r1", "read_file", json!({ "path": path }))]),
        Step::text("Read."),
    ]);
    let served = serve(&home, &model, &[], None);
    served.post("/api/v1/sessions", json!({"id": "ann"}));
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Read it"}));
    let question = served.pending("ann");
    assert_eq!(question["requested_grants"], json!([wanted]), "{question}");
    // The plugin's word, not something the sandbox saw.
    let reason = question["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("`read_file` failed for want of a grant")
            && reason.contains("the plugin says it lacked"),
        "{question}"
    );
    served.answer(&question, "yes");
    events.until("turn_finished", Duration::from_secs(60));
    let refused = model.result(1, "r0");
    assert!(
        refused.contains("outside the directories granted"),
        "{refused}"
    );
    let result = model.result(2, "r1");
    assert!(result.contains("the notes outside /data"), "{result}");
    served.terminate(Duration::from_secs(30));
    // For this call only: nothing was written to the lock.
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains(&other.display().to_string()), "{lock}");
}

/// An environment variable that was not granted is absent inside the sandbox: the plugin says
/// it lacked `env:NAME`, a person grants it for the session, and the call runs again with the
/// value read from the host's environment, which never reaches the lock.
#[test]
fn an_environment_variable_the_call_lacked_is_asked_for_by_name() {
    // No network grant: a tool that can send data out is not offered a private variable once
    // its session saw untrusted content (the Rule of Two), and this one would see its own.
    let home = TestHome::new();
    home.cordon(&["plugin", "install", fixture("probe").to_str().unwrap()])
        .ok();
    let config = home.scratch("cfg-env").join("cordon.toml");
    std::fs::write(&config, "[approval.tools]\n\"probe.env\" = \"auto\"\n").unwrap();
    let need = |id: &str| {
        call(
            id,
            "env",
            json!({ "name": "CORDON_TEST_SECRET", "need": true }),
        )
    };
    let model = Model::new(vec![
        Step::tool_calls(vec![need("e1")]),
        Step::text("Read."),
        // The next turn: given for the session, it is not asked for again.
        Step::tool_calls(vec![need("e2")]),
        Step::text("Again."),
    ]);
    let served = serve(
        &home,
        &model,
        &[("CORDON_TEST_SECRET", "s3cret-value")],
        Some(&config),
    );
    served.post("/api/v1/sessions", json!({"id": "ann"}));
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Read it"}));
    let question = served.pending("ann");
    assert_eq!(
        question["requested_grants"],
        json!(["env:CORDON_TEST_SECRET"]),
        "{question}"
    );
    served.answer(&question, "always");
    events.until("turn_finished", Duration::from_secs(60));
    assert!(
        model.result(1, "e1").contains("s3cret-value"),
        "{}",
        model.result(1, "e1")
    );
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Again"}));
    events.until("turn_finished", Duration::from_secs(60));
    assert!(model.result(3, "e2").contains("s3cret-value"));
    served.terminate(Duration::from_secs(30));
    let lock = std::fs::read_to_string(home.path().join("plugins.toml")).unwrap();
    assert!(!lock.contains("CORDON_TEST_SECRET"), "{lock}");
}

/// A grant given for good through a grant request is kept by the session too (a chat does not
/// reload the lock), but `cordon revoke` run while the session lives takes it back from it:
/// the next call is asked about again instead of running with it.
#[test]
fn revoking_a_grant_given_for_good_reaches_the_running_session() {
    let (home, _granted, other, config) = setup();
    let model = Model::new(vec![
        Step::tool_calls(vec![fetch("f1", &other.url("/b"))]),
        Step::text("Fetched."),
        Step::tool_calls(vec![fetch("f2", &other.url("/c"))]),
        Step::text("Again."),
        Step::tool_calls(vec![fetch("f3", &other.url("/d"))]),
        Step::text("Not this time."),
    ]);
    let served = serve(&home, &model, &[], Some(&config));
    served.post("/api/v1/sessions", json!({"id": "ann"}));
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Fetch"}));
    let question = served.pending("ann");
    served.answer(&question, "forever");
    events.until("turn_finished", Duration::from_secs(60));
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Again"}));
    events.until("turn_finished", Duration::from_secs(60));
    assert_eq!(other.asked(), ["/b", "/c"]);
    let wanted = format!("net:{}", other.origin());
    home.cordon(&["revoke", "probe", &wanted]).ok();
    let events = served.stream(
        "/api/v1/sessions/ann/messages",
        json!({"text": "Once more"}),
    );
    let asked_again = crate::grant_requests::next_question(&served, "ann", &question);
    assert_eq!(
        asked_again["requested_grants"],
        json!([wanted]),
        "{asked_again}"
    );
    served.answer(&asked_again, "no");
    events.until("turn_finished", Duration::from_secs(60));
    assert_eq!(other.asked(), ["/b", "/c"]);
    served.terminate(Duration::from_secs(30));
}

/// A database outside every grant that a call writes: `sql` says it lacked the database's
/// directory read-write, so one question is enough for the write to run.
#[test]
fn a_database_written_outside_the_grants_is_asked_for_read_write_once() {
    let home = TestHome::new();
    let data = home.scratch("data");
    let other = std::fs::canonicalize(home.scratch("elsewhere")).unwrap();
    cordon_tests::support::install(
        &home,
        "sql",
        &[cordon_tests::support::grant_fs(&data, "/data", "ro")],
        &[],
    );
    let database = other.join("shop.db").display().to_string();
    let model = Model::new(vec![
        Step::tool_calls(vec![call(
            "w1",
            "sql_execute",
            json!({"database": database, "create": true,
                   "sql": "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (42)"}),
        )]),
        Step::text("Written."),
    ]);
    let served = serve(&home, &model, &[], None);
    served.post("/api/v1/sessions", json!({"id": "ann"}));
    let events = served.stream("/api/v1/sessions/ann/messages", json!({"text": "Write it"}));
    // `sql_execute` is destructive: asked before it runs, then about the grant it lacked.
    let approval = served.pending("ann");
    served.answer(&approval, "yes");
    // The same call's next question.
    let question =
        cordon_tests::serve::eventually(Duration::from_secs(60), "a grant request", || {
            served.get("/api/v1/approvals").json["pending"]
                .as_array()?
                .iter()
                .find(|p| p["session"] == "ann" && p.get("requested_grants").is_some())
                .cloned()
        });
    let wanted = format!("fs:{0}:{0}:rw", other.display());
    assert_eq!(question["requested_grants"], json!([wanted]), "{question}");
    served.answer(&question, "yes");
    events.until("turn_finished", Duration::from_secs(60));
    let result = model.result(1, "w1");
    assert!(!result.starts_with("Error"), "{result}");
    served.terminate(Duration::from_secs(30));
    assert!(
        holds_sqlite_data(&other.join("shop.db")),
        "the database was written"
    );
}

/// Whether `path` is a SQLite file holding data (its header, and more than the header page).
fn holds_sqlite_data(path: &std::path::Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.starts_with(b"SQLite format 3\0") && b.len() >= 4096)
}
