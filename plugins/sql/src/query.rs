//! `sql_query`: one read-only statement, capped.

use cordon_sdk::ToolError;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::args::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, LIMIT_MAX_BYTES, LIMIT_MAX_ROWS, QueryArgs,
};
use crate::db::{bind, open_read, resolve_database, sqlite_error};
use crate::value::collect;

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

/// What `sql_query` returns.
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

pub fn run(mut args: QueryArgs) -> Result<QueryResult, ToolError> {
    args.database = resolve_database(&args.database)?;
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
    let rows = collect(&mut stmt, max_rows, max_bytes)?;
    let note = rows.truncated_by.map(|by| match by {
        "max_rows" => format!(
            "more rows exist beyond the first {max_rows}; raise max_rows, add LIMIT/OFFSET, or aggregate"
        ),
        _ => format!(
            "stopped at about {max_bytes} bytes of rows; select fewer or narrower columns, or raise max_bytes"
        ),
    });
    Ok(QueryResult {
        columns: rows.columns,
        row_count: rows.rows.len(),
        rows: rows.rows,
        truncated: rows.truncated_by.is_some(),
        truncated_by: rows.truncated_by.map(str::to_owned),
        note,
    })
}
