//! Argument types; their doc comments are the descriptions models read.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// Directory to list, as granted (e.g. `/data` or `/data/src`). `/` lists the granted
    /// directories themselves.
    pub path: String,
    /// Maximum number of entries to return (default 500, at most 5000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 5000))]
    pub max_entries: Option<u32>,
}

/// Arguments of `find_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindFilesArgs {
    /// Glob pattern. Without a `/` it matches file names anywhere (`*.rs`, `Cargo.toml`,
    /// `*test*`); with a `/` it matches the path relative to `path` (`src/**/*.rs`).
    /// Supports `*`, `?`, `**`, `[abc]` and `{a,b}`.
    pub pattern: String,
    /// Directory to search in, as granted (default: every granted directory).
    #[serde(default)]
    pub path: Option<String>,
    /// Also look at hidden files and directories (names starting with `.`); default false.
    #[serde(default)]
    pub hidden: bool,
    /// Also look at files excluded by .gitignore/.ignore files; default false.
    #[serde(default)]
    pub no_ignore: bool,
    /// Maximum number of paths to return (default 500, at most 10000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub max_results: Option<u32>,
}

/// Arguments of `search_text`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchTextArgs {
    /// What to search for: a regular expression (Rust regex syntax) unless `literal` is true.
    pub pattern: String,
    /// File or directory to search, as granted (default: every granted directory).
    #[serde(default)]
    pub path: Option<String>,
    /// Treat `pattern` as plain text, not a regular expression; default false.
    #[serde(default)]
    pub literal: bool,
    /// Match regardless of letter case; default false.
    #[serde(default)]
    pub ignore_case: bool,
    /// Lines of context to show before and after each match (default 0, at most 10).
    #[serde(default)]
    #[schemars(range(max = 10))]
    pub context: Option<u32>,
    /// Stop after this many matching lines in total (default 200, at most 5000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 5000))]
    pub max_matches: Option<u32>,
    /// Stop after this many matching lines in one file (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 5000))]
    pub max_per_file: Option<u32>,
    /// Only search files whose name (or, with a `/`, relative path) matches this glob,
    /// e.g. `*.py`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Also search hidden files and directories; default false.
    #[serde(default)]
    pub hidden: bool,
    /// Also search files excluded by .gitignore/.ignore files; default false.
    #[serde(default)]
    pub no_ignore: bool,
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File to read, as granted (e.g. `/data/notes.txt`).
    pub path: String,
    /// First line to return, counting from 1 (default 1).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub start_line: Option<u64>,
    /// Last line to return, inclusive (default: as many as fit in `max_bytes`).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub end_line: Option<u64>,
    /// Maximum bytes of text to return (default 65536, at most 1048576). Whole lines are
    /// returned; the result says where to continue.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_bytes: Option<u32>,
}

/// Checks an optional numeric cap against its bounds.
pub fn cap(
    name: &str,
    value: Option<u32>,
    default: u32,
    limit: u32,
) -> Result<usize, cordon_sdk::ToolError> {
    match value {
        None => Ok(default as usize),
        Some(0) => Err(cordon_sdk::ToolError::invalid(format!(
            "`{name}` must be at least 1"
        ))),
        Some(n) if n > limit => Err(cordon_sdk::ToolError::invalid(format!(
            "`{name}` is {n}, above the limit of {limit}"
        ))),
        Some(n) => Ok(n as usize),
    }
}
