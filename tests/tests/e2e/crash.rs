//! `cordon serve` killed with SIGKILL again and again under load, briefly: the soak of
//! `examples/common/crash.rs` (its doc says what it runs and checks), which `serve_crash` runs
//! for long (docs/reliability.md), here with three kills on SQLite.

#[path = "../../examples/common/crash.rs"]
mod soak;

#[test]
fn killed_again_and_again_nothing_acknowledged_is_lost_and_nothing_runs_twice() {
    let cordon = cordon_tests::cordon_bin();
    let probe = cordon_tests::fixture("probe");
    let args: Vec<String> = [
        "--cordon",
        cordon.to_str().unwrap(),
        "--probe",
        probe.to_str().unwrap(),
        "--clients",
        "3",
        "--kills",
        "3",
        "--seconds",
        "60",
        "--kill-ms",
        "1500-3000",
        "--seed",
        "7",
    ]
    .map(String::from)
    .to_vec();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    assert!(
        runtime.block_on(soak::run(&args)),
        "an invariant broke: see what was printed above"
    );
}
