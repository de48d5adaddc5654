//! `cordon serve` killed with SIGKILL again and again under load; what it runs and checks is
//! the doc of `common/crash.rs`, which `make test` also runs briefly (the e2e test
//! `crash::killed_again_and_again_nothing_acknowledged_is_lost_and_nothing_runs_twice`).
//!
//! `cargo run -p cordon-tests --example serve_crash -- [--cordon target/debug/cordon]
//! [--store sqlite|postgres] [--clients 6] [--kills 20] [--seconds 900] [--kill-ms 2000-6000]
//! [--seed N]`. Exits 1 when an invariant is broken.

mod common {
    pub mod crash;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !common::crash::run(&args).await {
        std::process::exit(1);
    }
}
