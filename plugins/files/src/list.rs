//! `list_dir`.

use std::fs;

use cordon_sdk::{Json, ToolError};
use serde_json::{Value, json};

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

pub fn run(fs_view: &GrantedDirs, args: ListDirArgs) -> Result<Json<Value>, ToolError> {
    let max = cap("max_entries", args.max_entries, 500, 5000)?;
    let path = fs_view.resolve(&args.path, "path")?;
    if !fs_view.is_granted(&path) {
        // Above the grants: show the granted directories below it, nothing else.
        let entries: Vec<Value> = fs_view
            .roots()
            .iter()
            .filter(|r| within(r, &path))
            .map(|r| json!({ "name": r, "type": "dir", "granted": true }))
            .collect();
        return Ok(Json(json!({
            "path": path,
            "note": "this directory is not granted; these granted directories are below it",
            "entries": entries,
        })));
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
        let mut item = json!({ "name": name, "type": kind(meta.file_type()) });
        if meta.is_file() {
            item["size"] = json!(meta.len());
        }
        if meta.file_type().is_symlink() {
            // Whether the link can be followed inside the sandbox (it cannot leave a grant).
            item["target_type"] = match fs::metadata(join(&path, &name)) {
                Ok(m) => json!(kind(m.file_type())),
                Err(_) => json!("unreachable (broken, or outside the granted directories)"),
            };
        }
        entries.push(item);
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let total = entries.len();
    let truncated = total > max;
    entries.truncate(max);
    let mut out =
        json!({ "path": path, "entries": entries, "total": total, "truncated": truncated });
    if truncated {
        out["note"] = json!(format!(
            "only the first {max} of {total} entries (by name); use find_files with a pattern to narrow down"
        ));
    }
    Ok(Json(out))
}
