//! Signing in to `cordon serve` with an identity provider's access tokens, against a real
//! OpenID provider (the certified `oidc-provider` npm package, `tests/oidc/provider.mjs`, on
//! 127.0.0.1): the user and scopes come from the token's claims; a token for another audience,
//! an expired one, one from a key the provider no longer publishes and one whose user is named
//! like a token of the token file are refused, saying why; a rotated key is followed; `/mcp`
//! points MCP clients at the provider (RFC 9728) and takes its tokens.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cordon_tests::TestHome;
use cordon_tests::oidc::Provider;
use cordon_tests::serve::Served;
use serde_json::{Value, json};

const OPERATOR: &str = "operator-0123456789abcdef";
const OPS: &str = "ops-0123456789abcdef0000";
const AUDIENCE: &str = "http://cordon.test";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `cordon serve` taking the provider's tokens, with the operator's and `ops`'s static tokens.
fn serve(home: &TestHome, issuer: &str) -> Served {
    std::fs::write(
        home.scratch("serve-cwd").join("cordon.toml"),
        format!(
            "[serve.oidc]\nissuer = \"{issuer}\"\naudience = [\"{AUDIENCE}\", \"{AUDIENCE}/mcp\"]\n\
             leeway_secs = 0\n"
        ),
    )
    .unwrap();
    let tokens: PathBuf = home.scratch("tokens").join("tokens");
    std::fs::write(&tokens, format!("{OPERATOR}\nops {OPS} admin\n")).unwrap();
    Served::start(home, &[], &["--token-file", tokens.to_str().unwrap()])
}

fn me(served: &Served, token: &str) -> (u16, Value, String) {
    let answer = served.raw("GET", "/api/v1/me", Some(token), None);
    (answer.status, answer.json, answer.text)
}

#[track_caller]
fn refused(served: &Served, token: &str, why: &str) {
    let (status, _, text) = me(served, token);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains(why), "refused for {why:?}? {text}");
}

#[test]
fn tokens_of_the_identity_provider_sign_in_and_bad_ones_are_refused_saying_why() {
    let home = TestHome::new();
    let port = free_port();
    let provider = Provider::start(port, "key-1");
    let mut served = serve(&home, &provider.issuer());

    // The user is the token's `sub`; the scopes its `scope` claim names, or the named
    // default without one.
    let agent = provider.token("agent", AUDIENCE, Some("cordon:sessions cordon:metrics"));
    let first_fetch = Instant::now();
    let (status, who, text) = me(&served, &agent);
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        who,
        json!({"name": "oidc:agent", "scopes": ["sessions", "metrics"]})
    );
    let plain = provider.token("agent", AUDIENCE, None);
    assert_eq!(
        me(&served, &plain).1,
        json!({"name": "oidc:agent", "scopes": ["sessions", "approve", "audit"]})
    );
    // A session made with such a token is its user's, as with a static token.
    served.token = agent.clone();
    let created = served.post("/api/v1/sessions", json!({"id": "from-sso"}));
    assert_eq!(created.status, 201, "{}", created.text);
    let listed = served.raw("GET", "/api/v1/sessions", Some(&plain), None);
    assert_eq!(
        listed.json["sessions"][0]["id"], "from-sso",
        "{}",
        listed.text
    );
    // The scope it lacks is named.
    let audit = served.raw("GET", "/api/v1/audit", Some(&agent), None);
    assert_eq!(audit.status, 403, "{}", audit.text);
    assert!(audit.text.contains("`audit`"), "{}", audit.text);

    refused(
        &served,
        &provider.token("agent", "http://other.test", Some("cordon:sessions")),
        "another audience",
    );
    // The provider's user `ops` is not the token file's `ops`: it does not see the static
    // token's sessions, whatever scopes it asked for that the provider did not grant.
    served.token = OPS.to_string();
    let theirs = served.post("/api/v1/sessions", json!({"id": "static-ops"}));
    assert_eq!(theirs.status, 201, "{}", theirs.text);
    let ops = provider.token("ops", AUDIENCE, Some("cordon:sessions"));
    assert_eq!(me(&served, &ops).1["name"], "oidc:ops");
    let seen = served.raw("GET", "/api/v1/sessions/static-ops", Some(&ops), None);
    assert_eq!(seen.status, 404, "{}", seen.text);
    // A scope value without `cordon:` (a group named `admin`) grants nothing.
    let plain_admin = provider.token("agent", AUDIENCE, Some("admin"));
    assert_eq!(
        me(&served, &plain_admin).1["scopes"],
        json!(["sessions", "approve", "audit"])
    );
    let short = provider.token("short", AUDIENCE, Some("cordon:sessions"));
    assert_eq!(me(&served, &short).0, 200);
    std::thread::sleep(Duration::from_millis(2100));
    refused(&served, &short, "expired");
    // A token whose signature was changed.
    let mut forged = agent.clone().into_bytes();
    let at = forged.len() - 20;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    refused(&served, &forged, "signature");
    // Something that is neither a static token nor a JWT says nothing.
    let (status, _, text) = me(&served, "not-a-token");
    assert_eq!((status, text.as_str()), (401, "unauthorized\n"));

    // `/mcp` tells a client without a token where to sign in, and takes the provider's tokens.
    let (status, challenge) = post_mcp(&served, None, &initialize());
    assert_eq!(status, 401);
    let metadata = served.raw(
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        None,
        None,
    );
    assert_eq!(metadata.status, 200, "{}", metadata.text);
    assert_eq!(
        metadata.json["authorization_servers"],
        json!([provider.issuer()])
    );
    assert_eq!(
        metadata.json["resource"],
        format!("http://{}/mcp", served.addr)
    );
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
            served.addr
        )),
        "{challenge}"
    );
    let for_mcp = provider.token("agent", &format!("{AUDIENCE}/mcp"), Some("cordon:sessions"));
    assert_eq!(post_mcp(&served, Some(&for_mcp), &initialize()).0, 200);

    // The provider rotates its key: tokens of the old key are refused once the host has
    // fetched the new key set (it fetches again at most every ten seconds), the new key's
    // tokens are taken.
    drop(provider);
    let provider = Provider::start(port, "key-2");
    let rotated = provider.token("agent", AUDIENCE, Some("cordon:sessions"));
    if let Some(wait) = Duration::from_secs(10).checked_sub(first_fetch.elapsed()) {
        std::thread::sleep(wait + Duration::from_millis(200));
    }
    assert_eq!(me(&served, &rotated).0, 200, "{}", me(&served, &rotated).2);
    refused(&served, &agent, "no key `key-1`");
    drop(provider);
}

/// `POST /mcp` with `body` and, if given, `token`, as an MCP client sends it: its status and
/// its `WWW-Authenticate`.
fn post_mcp(served: &Served, token: Option<&str>, body: &Value) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut request = reqwest::Client::new()
            .post(format!("http://{}/mcp", served.addr))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("POST /mcp");
        let challenge = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        (response.status().as_u16(), challenge)
    })
}

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "sso-test", "version": "1"}}
    })
}
