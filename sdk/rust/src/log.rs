//! Logging into the host's log through the WIT `log` import.
//!
//! Records are attributed to the plugin and never reach the model, so they are the place for
//! diagnostics that would only confuse it. When the plugin is compiled natively (unit tests)
//! records go to stderr instead, because there is no host to receive them.

/// Severity of a log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Information useful when debugging the plugin.
    Debug,
    /// Normal operation worth recording.
    Info,
    /// Something unexpected that the plugin worked around.
    Warn,
    /// Something failed.
    Error,
}

/// Records `message` with key/value `fields` in the host's log.
pub fn write(level: Level, message: &str, fields: &[(&str, &str)]) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::bindings::cordon::tool::log as wit;
        let level = match level {
            Level::Trace => wit::Level::Trace,
            Level::Debug => wit::Level::Debug,
            Level::Info => wit::Level::Info,
            Level::Warn => wit::Level::Warn,
            Level::Error => wit::Level::Error,
        };
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        wit::write(level, message, &fields);
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let fields: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        eprintln!("[{level:?}] {message} {}", fields.join(" "));
    }
}

/// Records a debug message.
pub fn debug(message: &str) {
    write(Level::Debug, message, &[]);
}

/// Records an informational message.
pub fn info(message: &str) {
    write(Level::Info, message, &[]);
}

/// Records a warning.
pub fn warn(message: &str) {
    write(Level::Warn, message, &[]);
}

/// Records an error.
pub fn error(message: &str) {
    write(Level::Error, message, &[]);
}
