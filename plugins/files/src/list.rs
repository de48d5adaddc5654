//! `list_dir`.

use std::fs;

use cordon_sdk::ToolError;
use schemars::JsonSchema;
use serde::Serialize;

use crate::args::{ListDirArgs, cap};
use cordon_sdk::paths::{GrantedDirs, join, within};

fn kind(ft: fs::FileType) -> &'static str {
    if ft.is_dir() {
        "dir"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    }
}

/// What `list_dir` returns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Listing {
    /// The directory listed, as an absolute guest path.
    pub path: String,
    /// Its entries, sorted by name (at most `max_entries`).
    pub entries: Vec<Entry>,
    /// How many entries it has in all.
    pub total: usize,
    /// Whether entries were left out.
    pub truncated: bool,
    /// What was left out and how to see it, or why only granted directories are shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One directory entry.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Entry {
    /// Its name (a full path for a granted directory shown above the grants).
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The size in bytes, for files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// For a symbolic link, the type of what it points to, or why it cannot be followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_type: Option<&'static str>,
    /// Present (true) for a granted directory listed above the grants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub granted: Option<bool>,
}

pub fn run(fs_view: &GrantedDirs, args: ListDirArgs) -> Result<Listing, ToolError> {
    let max = cap("max_entries", args.max_entries, 500, 5000)?;
    let path = fs_view.resolve_dir(&args.path, "path")?;
    if !fs_view.is_granted(&path) {
        // Above the grants: show the granted directories below it, nothing else.
        let entries: Vec<Entry> = fs_view
            .roots()
            .iter()
            .filter(|r| within(r, &path))
            .map(|r| Entry {
                name: r.clone(),
                kind: "dir",
                size: None,
                target_type: None,
                granted: Some(true),
            })
            .collect();
        return Ok(Listing {
            path,
            total: entries.len(),
            entries,
            truncated: false,
            note: Some(
                "this directory is not granted; these granted directories are below it".into(),
            ),
        });
    }
    let meta = fs::metadata(&path).map_err(|e| fs_view.io_error(&path, &e))?;
    if !meta.is_dir() {
        return Err(ToolError::invalid(format!(
            "{path} is a file, not a directory; use read_file to read it"
        )));
    }
    let read = fs::read_dir(&path).map_err(|e| fs_view.io_error(&path, &e))?;
    let mut entries = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| fs_view.io_error(&path, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // Never follow links here: where a link points is host layout, not the guest's.
        let meta = entry
            .metadata()
            .map_err(|e| fs_view.io_error(&join(&path, &name), &e))?;
        let target_type = meta.file_type().is_symlink().then(|| {
            // Whether the link can be followed inside the sandbox (it cannot leave a grant).
            match fs::metadata(join(&path, &name)) {
                Ok(m) => kind(m.file_type()),
                Err(_) => "unreachable (broken, or outside the granted directories)",
            }
        });
        entries.push(Entry {
            kind: kind(meta.file_type()),
            size: meta.is_file().then_some(meta.len()),
            target_type,
            granted: None,
            name,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let total = entries.len();
    let truncated = total > max;
    entries.truncate(max);
    Ok(Listing {
        path,
        entries,
        total,
        truncated,
        note: truncated.then(|| {
            format!(
                "only the first {max} of {total} entries (by name); use find_files with a pattern to narrow down"
            )
        }),
    })
}
