//! Capped capture of a plugin's stdout/stderr and its `cordon:tool/log` records.
//!
//! Past the cap, bytes are dropped but writes still succeed: a plugin whose `eprintln!` failed
//! would panic, and the cap must never be the cause of a crash.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How much of the most recent output is kept for reporting a call that was stopped.
const TAIL_BYTES: usize = 1024;

/// What a log record costs of the log budget besides its text: about what its line in the host
/// log takes (time, level, plugin name).
const LOG_RECORD_OVERHEAD: usize = 64;

#[derive(Debug)]
struct Buf {
    /// The first `cap` bytes written.
    data: Vec<u8>,
    cap: usize,
    truncated: bool,
    /// The last bytes written (at least `TAIL_BYTES` of them once that much was written), kept
    /// past the cap: when a call is stopped, its last words say where it was.
    tail: Vec<u8>,
}

/// A shared, capped byte sink handed to WASI as stdout and stderr.
#[derive(Clone, Debug)]
pub(crate) struct CappedPipe {
    buf: Arc<Mutex<Buf>>,
    plugin: Arc<str>,
}

impl CappedPipe {
    pub(crate) fn new(cap: usize, plugin: Arc<str>) -> CappedPipe {
        CappedPipe {
            buf: Arc::new(Mutex::new(Buf {
                data: Vec::new(),
                cap,
                truncated: false,
                tail: Vec::new(),
            })),
            plugin,
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut b = match self.buf.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        b.tail
            .extend_from_slice(&bytes[bytes.len().saturating_sub(TAIL_BYTES)..]);
        if b.tail.len() > 2 * TAIL_BYTES {
            let excess = b.tail.len() - TAIL_BYTES;
            b.tail.drain(..excess);
        }
        let room = b.cap.saturating_sub(b.data.len());
        let take = room.min(bytes.len());
        if take > 0 {
            b.data.extend_from_slice(&bytes[..take]);
            let text = String::from_utf8_lossy(&bytes[..take]);
            let text = text.trim_end_matches('\n');
            if !text.is_empty() {
                tracing::info!(target: "cordon::plugin", plugin = %self.plugin, "{text}");
            }
        }
        if take < bytes.len() && !b.truncated {
            b.truncated = true;
            // Not a warning: plugins may echo everything they print (the Python tool does, so a
            // stopped call can quote its last lines), and the tail is kept regardless.
            tracing::debug!(target: "cordon::plugin", plugin = %self.plugin, cap = b.cap, "plugin output reached the log limit; the rest is not logged");
        }
    }

    /// The captured text (lossy UTF-8) and whether anything was dropped.
    pub(crate) fn take(&self) -> (String, bool) {
        let b = match self.buf.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        (String::from_utf8_lossy(&b.data).into_owned(), b.truncated)
    }

    /// The last lines the plugin wrote (at most `max_lines`, from the last `TAIL_BYTES` bytes),
    /// for the report of a call that was stopped or crashed; `None` if it wrote nothing.
    pub(crate) fn last_lines(&self, max_lines: usize) -> Option<String> {
        let b = match self.buf.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut tail = &b.tail[b.tail.len().saturating_sub(TAIL_BYTES)..];
        let cut = tail.len() < b.tail.len();
        if cut {
            // Start at a character boundary.
            while let Some((first, rest)) = tail.split_first() {
                if first & 0b1100_0000 != 0b1000_0000 {
                    break;
                }
                tail = rest;
            }
        }
        let text = String::from_utf8_lossy(tail);
        let text = text.trim_end();
        if text.is_empty() {
            return None;
        }
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(max_lines);
        // The first line of a cut tail may be partial: drop it when there are others.
        let from = if cut && from == 0 && lines.len() > 1 {
            1
        } else {
            from
        };
        Some(lines[from..].join("\n"))
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always accept a full chunk; excess is dropped in `write`.
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Byte budget for `cordon:tool/log` records of one call.
pub(crate) struct LogSink {
    pub(crate) plugin: Arc<str>,
    remaining: usize,
    dropped: u64,
}

impl LogSink {
    pub(crate) fn new(cap: usize, plugin: Arc<str>) -> LogSink {
        LogSink {
            plugin,
            remaining: cap,
            dropped: 0,
        }
    }

    /// Emits a record if it fits in the budget; otherwise counts it as dropped.
    pub(crate) fn write(
        &mut self,
        level: tracing::Level,
        message: &str,
        fields: &[(String, String)],
    ) {
        // Every record costs at least its line's overhead, so empty records cannot flood the
        // host log for free.
        let size = LOG_RECORD_OVERHEAD
            + message.len()
            + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if size > self.remaining {
            if self.dropped == 0 {
                tracing::warn!(target: "cordon::plugin", plugin = %self.plugin, "plugin log reached the log limit; further records are dropped");
            }
            self.dropped += 1;
            self.remaining = 0;
            return;
        }
        self.remaining -= size;
        let fields = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let plugin = &*self.plugin;
        match level {
            tracing::Level::TRACE => {
                tracing::trace!(target: "cordon::plugin", plugin, fields, "{message}")
            }
            tracing::Level::DEBUG => {
                tracing::debug!(target: "cordon::plugin", plugin, fields, "{message}")
            }
            tracing::Level::INFO => {
                tracing::info!(target: "cordon::plugin", plugin, fields, "{message}")
            }
            tracing::Level::WARN => {
                tracing::warn!(target: "cordon::plugin", plugin, fields, "{message}")
            }
            _ => tracing::error!(target: "cordon::plugin", plugin, fields, "{message}"),
        }
    }

    /// How many records were dropped for exceeding the budget.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_caps_without_failing_writes() {
        let mut p = CappedPipe::new(10, Arc::from("t"));
        assert!(OutputStream::write(&mut p, Bytes::from_static(b"hello ")).is_ok());
        assert!(OutputStream::write(&mut p, Bytes::from_static(b"world, more")).is_ok());
        assert!(
            p.check_write().unwrap() > 0,
            "a full pipe still accepts writes"
        );
        assert_eq!(p.take(), ("hello worl".to_string(), true));
    }

    #[test]
    fn last_lines_survive_the_cap() {
        let mut p = CappedPipe::new(8, Arc::from("t"));
        assert_eq!(p.last_lines(3), None);
        for i in 0..5000 {
            OutputStream::write(&mut p, Bytes::from(format!("line {i}\n"))).unwrap();
        }
        assert_eq!(p.take(), ("line 0\nl".to_string(), true));
        assert_eq!(
            p.last_lines(3).as_deref(),
            Some("line 4997\nline 4998\nline 4999")
        );
        // From a tail cut inside a multi-byte character, nothing invalid or partial comes out.
        let mut p = CappedPipe::new(8, Arc::from("t"));
        OutputStream::write(&mut p, Bytes::from("é".repeat(TAIL_BYTES))).unwrap();
        OutputStream::write(&mut p, Bytes::from_static(b"x\nlast\n")).unwrap();
        let lines = p.last_lines(5).unwrap();
        assert_eq!(lines, "last", "{lines}");
        let mut p = CappedPipe::new(8, Arc::from("t"));
        OutputStream::write(&mut p, Bytes::from("é".repeat(TAIL_BYTES))).unwrap();
        let lines = p.last_lines(5).unwrap();
        assert!(!lines.contains('\u{fffd}'), "{lines}");
    }

    #[test]
    fn log_budget_drops_excess() {
        let mut l = LogSink::new(LOG_RECORD_OVERHEAD + 10, Arc::from("t"));
        l.write(tracing::Level::INFO, "12345", &[]);
        assert_eq!(l.dropped(), 0);
        l.write(tracing::Level::INFO, "123", &[("k".into(), "vv".into())]);
        assert_eq!(l.dropped(), 1);
        l.write(tracing::Level::INFO, "1", &[]);
        assert_eq!(l.dropped(), 2, "once full, everything is dropped");
    }

    #[test]
    fn empty_log_records_are_not_free() {
        let mut l = LogSink::new(10 * LOG_RECORD_OVERHEAD, Arc::from("t"));
        for _ in 0..10 {
            l.write(tracing::Level::INFO, "", &[]);
        }
        assert_eq!(l.dropped(), 0);
        l.write(tracing::Level::INFO, "", &[]);
        assert_eq!(l.dropped(), 1);
    }
}
