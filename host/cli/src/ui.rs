//! Terminal interaction: the compile spinner and yes/no confirmation.

use std::cell::RefCell;
use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use cordon_runtime::CompileEvent;
use indicatif::{ProgressBar, ProgressStyle};

use crate::term::{Stream, ask};

/// Components at least this big take long enough to compile that silence would look like a
/// hang (a CPython component takes 15–20 s the first time).
const SPINNER_MIN_BYTES: usize = 1 << 20;

/// Shows a spinner on stderr while a large component compiles for the first time; silent when
/// stderr is not a terminal, so scripts and logs stay clean.
pub struct CompileSpinner {
    bar: RefCell<Option<ProgressBar>>,
    enabled: bool,
}

impl CompileSpinner {
    pub fn new() -> Self {
        CompileSpinner {
            bar: RefCell::new(None),
            enabled: std::io::stderr().is_terminal(),
        }
    }

    pub fn observe(&self, event: CompileEvent) {
        match event {
            CompileEvent::Started { bytes } => {
                tracing::info!(bytes, "compiling component");
                if self.enabled && bytes >= SPINNER_MIN_BYTES {
                    let bar = ProgressBar::new_spinner();
                    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
                        bar.set_style(style);
                    }
                    bar.set_message(format!(
                        "compiling a {:.1} MiB component (only the first time)…",
                        bytes as f64 / (1024.0 * 1024.0)
                    ));
                    bar.enable_steady_tick(Duration::from_millis(120));
                    *self.bar.borrow_mut() = Some(bar);
                }
            }
            CompileEvent::Finished { elapsed } => {
                tracing::info!(?elapsed, "compiled component");
                if let Some(bar) = self.bar.borrow_mut().take() {
                    bar.finish_and_clear();
                }
            }
            CompileEvent::CacheHit => tracing::debug!("compiled code loaded from cache"),
        }
    }
}

impl Drop for CompileSpinner {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.borrow_mut().take() {
            bar.finish_and_clear();
        }
    }
}

/// Asks a yes/no question on the terminal; anything but `y`/`yes` is no. Returns `None` when
/// stdin is not a terminal, so the caller can refuse instead of guessing.
pub fn confirm(question: &str) -> Option<bool> {
    if !std::io::stdin().is_terminal() {
        return None;
    }
    // Shown plainly whatever attributes earlier output left set.
    Stream::Stderr.reset_attributes();
    ask(&format!("{question} [y/N] "));
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return Some(false);
    }
    Some(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// The first 12 hex digits of a digest, enough to tell components apart in a listing.
pub fn short_digest(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}
