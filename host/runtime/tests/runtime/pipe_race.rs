//! Races against the sandbox's opens: a named pipe swapped in under `open-at` (see
//! `open_files` in the runtime), a link swapped in for a granted directory (`preopens`).
//!
//! Runs alone in the test process: its swapper keeps a core busy, which would disturb the
//! timing of tests running beside it.
#![cfg(unix)]

use std::time::Duration;

use crate::common::*;
use cordon_core::Limits;

/// Someone who can write a granted directory swaps a named pipe and a regular file at one
/// path as fast as they can while the guest opens it over and over. A look before a blocking
/// open loses this race sooner or later (measured: Cordon's earlier `stat`-then-open hung
/// within the first call); the non-blocking open after the look finds what the look missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_pipe_in_under_the_open_cannot_make_it_wait() {
    let _process = alone();
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    let (pipe, regular, swap, target) = (
        d.join("pipe"),
        d.join("regular"),
        d.join("swap"),
        d.join("target"),
    );
    mkfifo(&pipe);
    std::fs::write(&regular, "x").unwrap();
    std::fs::hard_link(&regular, &target).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = std::thread::spawn({
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (pipe, regular, swap, target) =
            (pipe.clone(), regular.clone(), swap.clone(), target.clone());
        move || {
            while !stop.load(Ordering::Relaxed) {
                for source in [&pipe, &regular] {
                    std::fs::hard_link(source, &swap).unwrap();
                    std::fs::rename(&swap, &target).unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let mut sb = sandbox(&[format!("fs:{}:/d:ro", d.display())]);
    sb.limits = Limits::default().with_overrides(["time=5s"]).unwrap();
    let opens = tokio::spawn({
        let swaps = swaps.clone();
        async move {
            // Calls of 200 opens kept, then 200 opened and closed one by one, for as long as
            // it takes the swapper to swap 10,000 times (at least 5 calls).
            let mut outcomes = Vec::new();
            while outcomes.len() < 5 || swaps.load(Ordering::Relaxed) < 10_000 {
                outcomes.push(fs(&sb, "hold_open", "/d/target", Some("200")).await);
            }
            outcomes
        }
    });
    let finished = tokio::time::timeout(Duration::from_secs(60), opens).await;
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let Ok(outcomes) = finished else {
        // Release the open waiting for a writer, then fail.
        let _ = std::fs::OpenOptions::new().write(true).open(&pipe);
        panic!("an open waited on a named pipe swapped in under it");
    };
    // Each call opened until it found the pipe (refused), or all 200 times.
    let mut refused = 0;
    for outcome in outcomes.unwrap() {
        let outcome = outcome.unwrap();
        if let Some(error) = outcome["error"].as_str() {
            assert!(error.contains("Not supported"), "{outcome}");
            refused += 1;
        }
    }
    assert!(refused > 0, "no open ever found the pipe");
    still_serves().await;
}

/// The review's race on the grant itself: whoever can write the parent of a granted directory
/// exchanges it with a symbolic link to somewhere else, over and over, while calls start. A
/// check of the path followed by an open of the path again loses this race now and then (a
/// review read outside the grant in 22 of 400 calls); the directory opened once without
/// following links and checked by identity never does. Calls may be refused while the link is
/// in place; none may read what lies outside.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_link_in_for_the_granted_directory_never_reaches_outside() {
    let _process = alone();
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(tmp.path()).unwrap();
    let (granted, outside, link) = (d.join("granted"), d.join("outside"), d.join("link"));
    std::fs::create_dir(&granted).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(granted.join("note.txt"), "inside").unwrap();
    std::fs::write(outside.join("note.txt"), "SECRET").unwrap();
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let sb = sandbox(&[format!("fs:{}:/g:ro", granted.display())]);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = std::thread::spawn({
        let (stop, swaps, granted, link) =
            (stop.clone(), swaps.clone(), granted.clone(), link.clone());
        move || {
            // Bounded: at most a million exchanges, and an even number so the tree ends as it
            // began.
            while !stop.load(Ordering::Relaxed) && swaps.load(Ordering::Relaxed) < 1_000_000 {
                for _ in 0..2 {
                    renameat_with(CWD, &granted, CWD, &link, RenameFlags::EXCHANGE).unwrap();
                }
                swaps.fetch_add(2, Ordering::Relaxed);
            }
        }
    });
    let (mut read_inside, mut refused) = (0, 0);
    for _ in 0..400 {
        match call(
            probe(),
            &sb,
            "fs",
            serde_json::json!({"op": "read", "path": "/g/note.txt"}),
        )
        .await
        {
            Ok(out) => {
                // The directory may be swapped after it was opened: the open handle still is
                // the granted directory, and the file below it is read through it.
                assert_eq!(
                    json_of(&out)["ok"],
                    "inside",
                    "a call read outside its grant"
                );
                read_inside += 1;
            }
            Err(e) => {
                let message = e.to_string();
                assert!(!message.contains("SECRET"), "{message}");
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > 0, "the swapper never ran");
    assert!(read_inside > 0, "no call got through ({refused} refused)");
    assert_eq!(
        std::fs::read_to_string(granted.join("note.txt")).unwrap(),
        "inside"
    );
}
