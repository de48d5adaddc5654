//! Attack case: a `log.write` whose fields all name one large string, a list that is small in
//! the guest and huge once copied. wasmtime's hostcall fuel (128 MiB copied per host call)
//! stops the call before the host allocates more; the host keeps serving. Runs alone in the
//! test process, whose peak memory is reset before the call, so the peak measured is the call's.

use crate::common::*;
use cordon_runtime::{CallError, Sandbox};
use serde_json::json;

/// The process's peak resident memory (`VmHWM`), in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_log_record_aliasing_one_string_stops_the_call_not_the_host() {
    let _process = alone();
    let sandbox = Sandbox::default();
    // Warm up (load the fixture, first instance) so the peak below is the call's.
    call(
        probe(),
        &sandbox,
        "log",
        json!({"alias_entries": 3, "size": 10}),
    )
    .await
    .unwrap();
    // Tests that ran before in this process may have set a higher peak than the call would;
    // writing 5 to clear_refs resets it to the current resident size.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = peak_kib();
    // 100k fields naming one 1 MiB string as key and value: 1.6 MB of list in the guest,
    // 200 GiB if the host copied every field.
    let e = call(
        probe(),
        &sandbox,
        "log",
        json!({"alias_entries": 100_000, "size": 1 << 20}),
    )
    .await
    .unwrap_err();
    match &e {
        CallError::Trapped(m) => assert!(m.contains("too much data is being copied"), "{m}"),
        other => panic!("expected a trap, got {other}"),
    }
    let grown_mib = (peak_kib() - before) / 1024;
    assert!(grown_mib < 512, "peak memory grew by {grown_mib} MiB");
    // The host serves the next call as before.
    let out = call(
        probe(),
        &sandbox,
        "log",
        json!({"alias_entries": 3, "size": 10}),
    )
    .await
    .unwrap();
    assert!(!out.stderr_truncated);
}
