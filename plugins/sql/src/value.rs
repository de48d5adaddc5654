//! SQLite values as JSON, and collecting rows under the row and byte caps.

use rusqlite::types::ValueRef;
use serde_json::{Value, json};

use crate::db::sqlite_error;
use cordon_sdk::ToolError;

/// Converts one SQLite value. Text that is not UTF-8 is repaired lossily; blobs become
/// `{"blob_hex": …, "bytes": n}` so a model can tell them from text.
pub fn to_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => json!(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => {
            let mut hex = String::with_capacity(b.len() * 2);
            for byte in b {
                hex.push_str(&format!("{byte:02x}"));
            }
            json!({ "blob_hex": hex, "bytes": b.len() })
        }
    }
}

/// Rows read from a statement, and why reading stopped early if it did.
pub struct Rows {
    pub columns: Vec<String>,
    pub rows: Vec<Value>,
    /// `Some("max_rows")` or `Some("max_bytes")` when more rows existed.
    pub truncated_by: Option<&'static str>,
}

/// Steps `stmt` (already bound) and collects up to `max_rows` rows and about `max_bytes`
/// bytes of JSON. One row beyond a cap is read to tell "exactly at the cap" from "truncated".
pub fn collect(
    stmt: &mut rusqlite::Statement<'_>,
    max_rows: usize,
    max_bytes: usize,
) -> Result<Rows, ToolError> {
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    let mut rows = Vec::new();
    let walked = walk(stmt, max_rows, max_bytes, |row| {
        rows.push(serde_json::from_slice(row).map_err(|e| ToolError::failed(e.to_string()))?);
        Ok(())
    })?;
    Ok(Rows {
        columns,
        rows,
        truncated_by: walked.truncated_by,
    })
}

/// How [`walk`] ended.
pub struct Walked {
    /// Rows handed over.
    pub rows: usize,
    /// `Some("max_rows")` or `Some("max_bytes")` when more rows existed.
    pub truncated_by: Option<&'static str>,
}

/// Steps `stmt` (already bound) and hands each row, as the JSON text of an array of its
/// values, to `each`, up to `max_rows` rows and about `max_bytes` bytes of JSON: one row at a
/// time, so that a result of any size takes the memory of one row. One row beyond a cap is
/// read to tell "exactly at the cap" from "truncated".
pub fn walk(
    stmt: &mut rusqlite::Statement<'_>,
    max_rows: usize,
    max_bytes: usize,
    mut each: impl FnMut(&[u8]) -> Result<(), ToolError>,
) -> Result<Walked, ToolError> {
    let width = stmt.column_count();
    let mut count = 0usize;
    let mut bytes = 0usize;
    let mut truncated_by = None;
    let mut values = Vec::with_capacity(width);
    let mut text = Vec::new();
    let mut raw = stmt.raw_query();
    while let Some(row) = raw.next().map_err(|e| sqlite_error("", &e))? {
        if count >= max_rows {
            truncated_by = Some("max_rows");
            break;
        }
        values.clear();
        for i in 0..width {
            values.push(to_json(row.get_ref(i).map_err(|e| sqlite_error("", &e))?));
        }
        text.clear();
        serde_json::to_writer(&mut text, &values).map_err(|e| ToolError::failed(e.to_string()))?;
        // With the comma and newline between rows.
        let size = text.len() + 2;
        if bytes + size > max_bytes {
            truncated_by = Some("max_bytes");
            break;
        }
        bytes += size;
        count += 1;
        each(&text)?;
    }
    Ok(Walked {
        rows: count,
        truncated_by,
    })
}
