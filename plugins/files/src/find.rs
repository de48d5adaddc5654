//! `find_files`: glob over a walk that honours .gitignore/.ignore.

use cordon_sdk::ToolError;
use globset::{Glob, GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use schemars::JsonSchema;
use serde::Serialize;

use crate::args::{FindFilesArgs, cap};
use cordon_sdk::paths::{GrantedDirs, join};

/// A glob that matches file names when it has no `/`, and relative paths otherwise, like a
/// .gitignore line.
pub struct PathGlob {
    matcher: GlobMatcher,
    by_name: bool,
}

impl PathGlob {
    pub fn new(pattern: &str, field: &str) -> Result<Self, ToolError> {
        let trimmed = pattern.trim_start_matches("./");
        let by_name = !trimmed.contains('/');
        let glob: Glob = GlobBuilder::new(trimmed.trim_start_matches('/'))
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| ToolError::invalid(format!("`{field}` is not a valid glob: {e}")))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            by_name,
        })
    }

    /// Whether a file at `rel` (relative to the search root, `/`-separated) matches.
    pub fn is_match(&self, rel: &str) -> bool {
        if self.by_name {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            self.matcher.is_match(name)
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// A walker over `root` with the tools' shared rules: .gitignore/.ignore honoured even
/// outside a git repository, hidden entries skipped unless asked, links not followed.
pub fn walker(root: &str, hidden: bool, no_ignore: bool) -> ignore::Walk {
    WalkBuilder::new(root)
        .hidden(!hidden)
        .git_ignore(!no_ignore)
        .git_exclude(!no_ignore)
        .ignore(!no_ignore)
        .parents(!no_ignore)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .build()
}

/// The path of `entry` relative to `root`, `/`-separated.
pub fn relative(root: &str, entry: &std::path::Path) -> String {
    entry
        .strip_prefix(root)
        .unwrap_or(entry)
        .to_string_lossy()
        .trim_start_matches('/')
        .to_owned()
}

/// What `find_files` returns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Found {
    /// The glob pattern, as given.
    pub pattern: String,
    /// The directories searched.
    pub searched: Vec<String>,
    /// The matching files' absolute guest paths, sorted within each searched directory.
    pub files: Vec<String>,
    /// How many paths `files` holds.
    pub count: usize,
    /// Whether the search stopped at `max_results`.
    pub truncated: bool,
    /// What to do to see more, when it stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// How many entries could not be read (permissions), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable_entries: Option<usize>,
}

pub fn run(fs_view: &GrantedDirs, args: FindFilesArgs) -> Result<Found, ToolError> {
    let max = cap("max_results", args.max_results, 500, 10_000)?;
    let glob = PathGlob::new(&args.pattern, "pattern")?;
    let roots = fs_view.resolve_or_roots(args.path.as_deref(), "path")?;
    let mut files = Vec::new();
    let mut truncated = false;
    let mut unreadable = 0usize;
    'roots: for root in &roots {
        check_root(fs_view, root)?;
        for entry in walker(root, args.hidden, args.no_ignore) {
            let entry = match entry {
                Ok(e) => e,
                Err(_) => {
                    unreadable += 1;
                    continue;
                }
            };
            let Some(ft) = entry.file_type() else {
                continue;
            };
            if ft.is_dir() {
                continue;
            }
            let rel = relative(root, entry.path());
            if !glob.is_match(&rel) {
                continue;
            }
            if files.len() == max {
                truncated = true;
                break 'roots;
            }
            files.push(join(root, &rel));
        }
    }
    Ok(Found {
        pattern: args.pattern,
        searched: roots,
        count: files.len(),
        files,
        truncated,
        note: truncated.then(|| {
            format!("stopped at {max} paths; use a narrower pattern or path, or raise max_results")
        }),
        unreadable_entries: (unreadable > 0).then_some(unreadable),
    })
}

/// Fails clearly when a search root cannot be read, before walking it.
pub fn check_root(fs_view: &GrantedDirs, root: &str) -> Result<(), ToolError> {
    std::fs::metadata(root)
        .map(|_| ())
        .map_err(|e| fs_view.io_error(root, &e))
}
