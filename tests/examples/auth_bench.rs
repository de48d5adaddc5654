//! What authorising a request costs `cordon serve`: `GET /api/v1/me` with a token of the token
//! file and with an identity provider's JWT (its key already fetched), against
//! `GET /api/v1/health`, which takes no token, in the same run: the differences of the p50s
//! (target ≤ 20 µs for the JWT). One keep-alive connection, requests one after the other in
//! rounds that alternate the three, so drift of the machine's speed falls on all alike. The
//! provider is the certified `oidc-provider` npm package (`make test` installs it) on
//! 127.0.0.1.
//!
//! `cargo run --release -p cordon-tests --example auth_bench -- [--cordon
//! target/release/cordon] [--requests 3000]`.

use std::time::{Duration, Instant};

use cordon_tests::bench::{TOKEN, file_arg, number, start_serve, write_token};
use cordon_tests::oidc::Provider;

const AUDIENCE: &str = "http://cordon.test";

fn p50(values: &mut [Duration]) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bin = file_arg(&args, "--cordon", "target/release/cordon");
    let requests = number(&args, "--requests", 3000);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let provider = Provider::start(port, "bench-key");
    let home = tempfile::tempdir().expect("a home");
    write_token(home.path());
    let config = home.path().join("auth.toml");
    std::fs::write(
        &config,
        format!(
            "[serve.oidc]\nissuer = \"{}\"\naudience = \"{AUDIENCE}\"\n\n[serve.limits]\n\
             requests_per_second = 1000000\nrequest_burst = 1000000\n",
            provider.issuer()
        ),
    )
    .expect("write the config");
    let (_serve, base) = start_serve(
        &bin,
        home.path(),
        &["--config", config.to_str().expect("a UTF-8 path")],
    );
    let jwt = provider.token("agent", AUDIENCE, Some("sessions"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("a client");
    let time = |path: &str, token: Option<&str>| {
        let mut request = client.get(format!("{base}{path}"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        rt.block_on(async {
            let start = Instant::now();
            let response = request.send().await.expect("a request");
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            response.bytes().await.expect("a body");
            start.elapsed()
        })
    };
    // Warm up: the connection, and the provider's keys fetched once.
    for _ in 0..200 {
        time("/api/v1/health", None);
        time("/api/v1/me", Some(TOKEN));
        time("/api/v1/me", Some(&jwt));
    }
    let (mut none, mut fixed, mut signed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..requests {
        none.push(time("/api/v1/health", None));
        fixed.push(time("/api/v1/me", Some(TOKEN)));
        signed.push(time("/api/v1/me", Some(&jwt)));
    }
    // A token's first request pays for its signature; later ones find it checked.
    let fresh: Vec<String> = (0..requests.min(500))
        .map(|_| provider.token("agent", AUDIENCE, Some("sessions")))
        .collect();
    let (mut none_again, mut first) = (Vec::new(), Vec::new());
    for token in &fresh {
        none_again.push(time("/api/v1/health", None));
        first.push(time("/api/v1/me", Some(token)));
    }
    let first_over = p50(&mut first).saturating_sub(p50(&mut none_again));
    let (none, fixed, signed) = (p50(&mut none), p50(&mut fixed), p50(&mut signed));
    let more = |d: Duration| us(d.saturating_sub(none));
    println!("| request | p50 | over no token |");
    println!("| --- | --- | --- |");
    println!("| `GET /api/v1/health`, no token | {} | |", us(none));
    println!(
        "| `GET /api/v1/me`, token file | {} | {} |",
        us(fixed),
        more(fixed)
    );
    println!(
        "| `GET /api/v1/me`, identity provider's JWT (RS256), checked before | {} | {} |",
        us(signed),
        more(signed)
    );
    println!(
        "| `GET /api/v1/me`, identity provider's JWT, its first request ({} tokens) | {} | {} |",
        fresh.len(),
        us(first_over + p50(&mut none_again)),
        us(first_over)
    );
    drop(provider);
}
