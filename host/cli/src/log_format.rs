//! How log records look on stderr. They carry text Cordon did not write — a plugin's log
//! records and stderr, a model server's error bodies — so every field is neutralised (see
//! [`crate::term::neutralise`]), whether stderr is a terminal or not: logs are read by people,
//! often later with `cat` or `tail -f` on a terminal. The formatter tracing-subscriber uses by
//! default escapes only ESC, BEL, BS, FF, DEL and C1 in messages: a bare CR, the other C0
//! controls and bidi controls pass, and so does everything in fields written with `%`.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;

use crate::term::write_neutralised;

/// A `fmt::Write` that neutralises everything written through it.
struct Neutralising<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Neutralising<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        write_neutralised(self.0, text)
    }
}

/// Formats the fields of log records with every value neutralised (`fmt().fmt_fields(LogFields)`).
pub struct LogFields;

impl<'w> MakeVisitor<Writer<'w>> for LogFields {
    type Visitor = LogFieldsVisitor<'w>;

    fn make_visitor(&self, writer: Writer<'w>) -> Self::Visitor {
        LogFieldsVisitor {
            writer,
            first: true,
            result: Ok(()),
        }
    }
}

/// Writes one record's fields as the default formatter lays them out: the message first, then
/// `name=value` pairs, separated by spaces.
pub struct LogFieldsVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl LogFieldsVisitor<'_> {
    fn record(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        // `log.*` fields carry the metadata of records from the `log` crate, which the
        // formatter shows itself.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let separator = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        let mut out = Neutralising(&mut self.writer);
        self.result = match field.name() {
            "message" => fmt::Write::write_fmt(&mut out, format_args!("{separator}{value}")),
            name => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                fmt::Write::write_fmt(&mut out, format_args!("{separator}{name}={value}"))
            }
        };
    }
}

impl Visit for LogFieldsVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record(field, format_args!("{value}"));
        } else {
            self.record(field, format_args!("{value:?}"));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        self.record(field, format_args!("{text}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format_args!("{value:?}"));
    }
}

impl VisitOutput<fmt::Result> for LogFieldsVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for LogFieldsVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::term::neutralise;
    use crate::term::tests::{HOSTILE, HOSTILE_SHOWN};

    /// Captures what a log formatter writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// Logs what a plugin's log record turns into (see `LogSink` in cordon-runtime): a hostile
    /// message and a hostile plugin name through `%`, with fields through `?`.
    fn log_hostile_record(subscriber: impl tracing::Subscriber + Send + Sync) {
        tracing::subscriber::with_default(subscriber, || {
            let plugin = format!("evil{HOSTILE}");
            let fields = format!("field={HOSTILE:?}");
            tracing::warn!(target: "cordon::plugin", plugin = %plugin, fields, "log {HOSTILE}");
        });
    }

    #[test]
    fn the_default_log_formatter_lets_terminal_controls_through() {
        // Why Cordon formats log fields itself: tracing-subscriber (0.3.23) escapes ESC in
        // messages, but a bare CR and bidi controls pass, and `%` fields pass raw.
        let captured = Captured::default();
        let sink = captured.clone();
        log_hostile_record(
            tracing_subscriber::fmt()
                .with_writer(move || sink.clone())
                .with_ansi(false)
                .with_target(false)
                .finish(),
        );
        let text = captured.text();
        assert!(text.contains("red\rback\u{202e}"), "{text:?}");
        assert!(text.contains("plugin=evil\u{1b}]0;"), "{text:?}");
    }

    #[test]
    fn log_records_are_neutralised() {
        let captured = Captured::default();
        let sink = captured.clone();
        log_hostile_record(
            tracing_subscriber::fmt()
                .with_writer(move || sink.clone())
                .with_ansi(false)
                .with_target(false)
                .fmt_fields(LogFields)
                .finish(),
        );
        let text = captured.text();
        assert_eq!(neutralise(&text), text, "something is left to neutralise");
        assert!(
            text.contains(&format!(
                "WARN log {HOSTILE_SHOWN} plugin=evil{HOSTILE_SHOWN} fields=\"field="
            )),
            "{text:?}"
        );
        assert!(text.ends_with('\n'), "{text:?}");
    }
}
