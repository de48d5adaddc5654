//! `read_file`: a window of lines, capped in bytes, with what a model needs to page on.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use cordon_sdk::{Content, ToolError};
use serde_json::json;

use crate::args::{ReadFileArgs, cap};
use cordon_sdk::paths::GrantedDirs;

/// How much of the start of a file is checked for NUL bytes to call it binary.
const SNIFF: usize = 8192;

pub fn run(fs_view: &GrantedDirs, args: ReadFileArgs) -> Result<Vec<Content>, ToolError> {
    let max_bytes = cap("max_bytes", args.max_bytes, 65_536, 1_048_576)?;
    let start = args.start_line.unwrap_or(1);
    if start == 0 {
        return Err(ToolError::invalid("`start_line` counts from 1"));
    }
    if let Some(end) = args.end_line
        && end < start
    {
        return Err(ToolError::invalid(format!(
            "`end_line` ({end}) is before `start_line` ({start})"
        )));
    }
    let path = fs_view.resolve(&args.path, "path")?;
    let meta = std::fs::metadata(&path).map_err(|e| fs_view.io_error(&path, &e))?;
    if meta.is_dir() {
        return Err(ToolError::invalid(format!(
            "{path} is a directory; use list_dir or find_files to see what is in it"
        )));
    }
    let file = File::open(&path).map_err(|e| fs_view.io_error(&path, &e))?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    {
        let head = reader.fill_buf().map_err(|e| fs_view.io_error(&path, &e))?;
        if head[..head.len().min(SNIFF)].contains(&0) {
            return Err(ToolError::invalid(format!(
                "{path} is a binary file ({} bytes); read_file only returns text",
                meta.len()
            )));
        }
    }

    let mut text = String::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut last_returned = 0u64;
    let mut cut_by_bytes = false;
    let mut cut_line = false;
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .read_until(b'\n', &mut line)
            .map_err(|e| fs_view.io_error(&path, &e))?;
        if n == 0 {
            break;
        }
        number += 1;
        let wanted = number >= start && args.end_line.is_none_or(|end| number <= end);
        if !wanted || cut_by_bytes {
            continue;
        }
        let piece = String::from_utf8_lossy(&line);
        if text.len() + piece.len() > max_bytes {
            cut_by_bytes = true;
            if last_returned == 0 {
                // A single line longer than the cap: return its start rather than nothing.
                let mut cut = max_bytes.min(piece.len());
                while !piece.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.push_str(&piece[..cut]);
                last_returned = number;
                cut_line = true;
            }
            continue;
        }
        text.push_str(&piece);
        last_returned = number;
    }
    let total_lines = number;
    if start > total_lines.max(1) {
        return Err(ToolError::invalid(format!(
            "`start_line` is {start} but {path} has only {total_lines} line(s)"
        )));
    }
    let mut info = json!({
        "path": path,
        "total_lines": total_lines,
        "bytes": meta.len(),
        "start_line": start,
        "end_line": last_returned,
        "truncated": cut_by_bytes,
    });
    if cut_by_bytes {
        if cut_line {
            info["note"] = json!(format!(
                "line {last_returned} is longer than max_bytes ({max_bytes}); only its start is shown"
            ));
        }
        if last_returned < total_lines {
            info["next_start_line"] = json!(last_returned + 1);
        }
    } else if last_returned < total_lines && args.end_line.is_none() {
        info["next_start_line"] = json!(last_returned + 1);
    }
    Ok(vec![Content::Text(text), Content::json(&info)?])
}
