//! Argument types; their doc comments are the descriptions models read.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// Directory to list, e.g. `/data/src`; `/` lists the granted directories.
    pub path: String,
    /// Most entries to return (default 500).
    #[serde(default)]
    #[schemars(range(min = 1, max = 5000))]
    pub max_entries: Option<u32>,
}

/// Arguments of `find_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindFilesArgs {
    /// Glob: without `/` it matches names anywhere (`*.rs`), with `/` the path below `path`
    /// (`src/**/*.rs`).
    pub pattern: String,
    /// Directory to search (default: all granted).
    #[serde(default)]
    pub path: Option<String>,
    /// Include hidden files.
    #[serde(default)]
    pub hidden: bool,
    /// Include files .gitignore excludes.
    #[serde(default)]
    pub no_ignore: bool,
    /// Most paths to return (default 500).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub max_results: Option<u32>,
}

/// Arguments of `search_text`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchTextArgs {
    /// A regular expression, or text with `literal`.
    pub pattern: String,
    /// File or directory to search (default: all granted).
    #[serde(default)]
    pub path: Option<String>,
    /// `pattern` is plain text.
    #[serde(default)]
    pub literal: bool,
    /// Ignore letter case.
    #[serde(default)]
    pub ignore_case: bool,
    /// Lines of context around each match (default 0).
    #[serde(default)]
    #[schemars(range(max = 10))]
    pub context: Option<u32>,
    /// Most matching lines in all (default 200).
    #[serde(default)]
    #[schemars(range(min = 1, max = 5000))]
    pub max_matches: Option<u32>,
    /// Most matching lines per file (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 5000))]
    pub max_per_file: Option<u32>,
    /// Only files matching this glob, e.g. `*.py`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Include hidden files.
    #[serde(default)]
    pub hidden: bool,
    /// Include files .gitignore excludes.
    #[serde(default)]
    pub no_ignore: bool,
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File to read, e.g. `/data/notes.txt`.
    pub path: String,
    /// First line, from 1.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub start_line: Option<u64>,
    /// Last line, inclusive.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub end_line: Option<u64>,
    /// Most bytes to return (default 65536).
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
