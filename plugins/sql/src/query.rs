//! `sql_query`: one read-only statement, capped, its rows written out one at a time (see
//! `cordon_sdk::written`), so a result of tens of megabytes takes the memory of one row.

use std::io::Write;

use cordon_sdk::ToolError;
use cordon_sdk::written::JsonWriter;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::args::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, LIMIT_MAX_BYTES, LIMIT_MAX_ROWS, QueryArgs,
};
use crate::db::{bind, open_read, resolve_database, sqlite_error};
use crate::value::walk;

fn cap(name: &str, value: Option<u32>, default: u32, limit: u32) -> Result<usize, ToolError> {
    match value {
        None => Ok(default as usize),
        Some(0) => Err(ToolError::invalid(format!("`{name}` must be at least 1"))),
        Some(n) if n > limit => Err(ToolError::invalid(format!(
            "`{name}` is {n}, above the limit of {limit}; aggregate in SQL or page with LIMIT/OFFSET"
        ))),
        Some(n) => Ok(n as usize),
    }
}

/// What `sql_query` returns: its shape, for the output schema (the object is written in
/// another order, the counts after the rows).
#[derive(Debug, Serialize, JsonSchema)]
pub struct QueryResult {
    /// The result's column names, in order.
    pub columns: Vec<String>,
    /// How many rows `rows` holds.
    pub row_count: usize,
    /// The rows, each an array of values in column order: a string, number or null, or for a
    /// BLOB an object `{"blob_hex": …, "bytes": n}`.
    pub rows: Vec<Value>,
    /// Whether more rows exist than were returned.
    pub truncated: bool,
    /// Which cap stopped reading (`max_rows` or `max_bytes`); only when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_by: Option<String>,
    /// What to do to see the rest; only when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What the writer refused, as the tool's error (the host fails the call with its own reason,
/// the output limit, in any case).
fn unwritten(e: std::io::Error) -> ToolError {
    ToolError::failed(format!("the result could not be written: {e}"))
}

pub fn run(mut args: QueryArgs, out: &mut JsonWriter<QueryResult>) -> Result<(), ToolError> {
    args.database = resolve_database(&args.database, false)?;
    let max_rows = cap("max_rows", args.max_rows, DEFAULT_MAX_ROWS, LIMIT_MAX_ROWS)?;
    let max_bytes = cap(
        "max_bytes",
        args.max_bytes,
        DEFAULT_MAX_BYTES,
        LIMIT_MAX_BYTES,
    )?;
    if args.sql.trim().is_empty() {
        return Err(ToolError::invalid(
            "`sql` is empty; send one SELECT statement",
        ));
    }
    let conn = open_read(&args.database)?;
    let mut stmt = conn
        .prepare(&args.sql)
        .map_err(|e| sqlite_error(&args.database, &e))?;
    // SQLite's own verdict (sqlite3_stmt_readonly), not string matching; the connection is
    // read-only and query_only besides, so a write could not succeed anyway.
    if !stmt.readonly() {
        return Err(ToolError::denied(
            "SQLite reports that this statement writes; sql_query only runs read-only \
             statements. Use sql_execute to change data (it needs a read-write grant)",
        ));
    }
    bind(&mut stmt, args.params.as_ref())?;
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    out.write_all(b"{\"columns\":").map_err(unwritten)?;
    serde_json::to_writer(&mut *out, &columns).map_err(|e| unwritten(e.into()))?;
    out.write_all(b",\"rows\":[").map_err(unwritten)?;
    // One row a line: a long result read by lines is read by rows (row N on line N + 1).
    let mut first = true;
    let walked = walk(&mut stmt, max_rows, max_bytes, |row| {
        let before: &[u8] = if std::mem::take(&mut first) {
            b"\n"
        } else {
            b",\n"
        };
        out.write_all(before).map_err(unwritten)?;
        out.write_all(row).map_err(unwritten)
    })?;
    let note = walked.truncated_by.map(|by| match by {
        "max_rows" => format!(
            "more rows exist beyond the first {max_rows}; raise max_rows, add LIMIT/OFFSET, or aggregate"
        ),
        _ => format!(
            "stopped at about {max_bytes} bytes of rows; select fewer or narrower columns, or raise max_bytes"
        ),
    });
    #[derive(Serialize)]
    struct Tail<'a> {
        row_count: usize,
        truncated: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        truncated_by: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    }
    let tail = serde_json::to_vec(&Tail {
        row_count: walked.rows,
        truncated: walked.truncated_by.is_some(),
        truncated_by: walked.truncated_by,
        note,
    })
    .map_err(|e| unwritten(e.into()))?;
    // The tail object's fields go on after the rows: `],` then its body without the `{`.
    out.write_all(if walked.rows > 0 { b"\n]," } else { b"]," })
        .map_err(unwritten)?;
    out.write_all(&tail[1..]).map_err(unwritten)?;
    out.flush().map_err(unwritten)
}
