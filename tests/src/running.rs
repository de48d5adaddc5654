//! A `cordon` command running in the background, fed through a pipe and watched as it prints:
//! for killing it at a chosen point of a conversation and looking at what survived.

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::TestHome;

/// A running `cordon` process.
pub struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let keep = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            keep.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

impl Running {
    /// Starts `cordon <args>` on `home` with `env`, from `cwd`, its stdin a pipe.
    pub fn start(
        home: &TestHome,
        cwd: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Running {
        let mut child = home
            .cordon_command(args)
            .envs(env.iter().copied())
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start cordon");
        let stdout = collect(child.stdout.take().expect("stdout is piped"));
        let stderr = collect(child.stderr.take().expect("stderr is piped"));
        Running {
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
        }
    }

    /// Types a line.
    pub fn line(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{text}\n").as_bytes())
            .expect("write to cordon's stdin");
        stdin.flush().expect("flush cordon's stdin");
    }

    /// Closes stdin (end of input).
    pub fn close_input(&mut self) {
        self.stdin = None;
    }

    /// What it printed so far: (stdout, stderr).
    pub fn output(&self) -> (String, String) {
        (
            self.stdout.lock().unwrap().clone(),
            self.stderr.lock().unwrap().clone(),
        )
    }

    /// Waits until stdout or stderr contains `needle` (bounded).
    pub fn wait_for(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let (out, err) = self.output();
            if out.contains(needle) || err.contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cordon did not print {needle:?} within {timeout:?}\n--- stdout\n{out}\n--- stderr\n{err}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills it outright (SIGKILL), as a crash would.
    pub fn kill9(mut self) -> (String, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(50));
        self.output()
    }

    /// Waits for it to exit by itself (bounded); returns its exit code and output.
    pub fn finish(mut self, timeout: Duration) -> (i32, String, String) {
        self.stdin = None;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for cordon") {
                std::thread::sleep(Duration::from_millis(100));
                let (out, err) = self.output();
                return (status.code().unwrap_or(-1), out, err);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let (out, err) = self.output();
                panic!(
                    "cordon did not exit within {timeout:?}\n--- stdout\n{out}\n--- stderr\n{err}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
