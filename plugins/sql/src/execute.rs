//! `sql_execute`: writes, in one transaction.

use cordon_sdk::ToolError;
use fallible_iterator::FallibleIterator;
use rusqlite::{Batch, Connection, Statement};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::args::{DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, ExecuteArgs};
use crate::db::{bind, open_write, resolve_database, sqlite_error};
use crate::value::{Rows, collect};

/// What running the statements did.
#[derive(Default)]
struct Outcome {
    statements: usize,
    changes: u64,
    returned: Option<Rows>,
}

fn step(conn: &Connection, stmt: &mut Statement<'_>, out: &mut Outcome) -> Result<(), ToolError> {
    out.statements += 1;
    let writes = !stmt.readonly();
    if stmt.column_count() > 0 {
        // INSERT … RETURNING, or a SELECT in a script: keep the last result, capped.
        out.returned = Some(collect(
            stmt,
            DEFAULT_MAX_ROWS as usize,
            DEFAULT_MAX_BYTES as usize,
        )?);
    } else {
        stmt.raw_execute().map_err(|e| sqlite_error("", &e))?;
    }
    if writes {
        out.changes += conn.changes();
    }
    Ok(())
}

fn run_all(conn: &Connection, args: &ExecuteArgs) -> Result<Outcome, ToolError> {
    let mut out = Outcome::default();
    if args.params.is_some() {
        let mut stmt = conn
            .prepare(&args.sql)
            .map_err(|e| sqlite_error(&args.database, &e))?;
        bind(&mut stmt, args.params.as_ref())?;
        step(conn, &mut stmt, &mut out)?;
    } else {
        let mut batch = Batch::new(conn, &args.sql);
        while let Some(mut stmt) = batch.next().map_err(|e| sqlite_error(&args.database, &e))? {
            if stmt.parameter_count() > 0 {
                return Err(ToolError::invalid(format!(
                    "statement {} has placeholders but no `params` were given; send one \
                     statement at a time with `params`",
                    out.statements + 1
                )));
            }
            step(conn, &mut stmt, &mut out)?;
        }
    }
    Ok(out)
}

/// What `sql_execute` returns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecuteResult {
    /// How many statements ran.
    pub statements: usize,
    /// How many rows they inserted, updated or deleted.
    pub changes: u64,
    /// The rowid of the last row inserted on this connection (0 if none).
    pub last_insert_rowid: i64,
    /// The column names of the last statement that returned rows (`RETURNING`, a SELECT in
    /// a script); only when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    /// Its rows, each an array of values in column order, capped as in `sql_query`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<Value>>,
    /// Whether it returned more rows than are shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

pub fn run(mut args: ExecuteArgs) -> Result<ExecuteResult, ToolError> {
    args.database = resolve_database(&args.database, true)?;
    if args.sql.trim().is_empty() {
        return Err(ToolError::invalid(
            "`sql` is empty; send the statement to run",
        ));
    }
    let conn = open_write(&args.database, args.create)?;
    let tx = conn
        .unchecked_transaction()
        .map_err(|e| sqlite_error(&args.database, &e))?;
    // On error `tx` is dropped, which rolls every statement back.
    let outcome = run_all(&conn, &args)?;
    if outcome.statements == 0 {
        return Err(ToolError::invalid(
            "`sql` contains no statement (only comments or whitespace)",
        ));
    }
    tx.commit().map_err(|e| sqlite_error(&args.database, &e))?;
    let (columns, rows, truncated) = match outcome.returned {
        Some(r) => (
            Some(r.columns),
            Some(r.rows),
            Some(r.truncated_by.is_some()),
        ),
        None => (None, None, None),
    };
    Ok(ExecuteResult {
        statements: outcome.statements,
        changes: outcome.changes,
        last_insert_rowid: conn.last_insert_rowid(),
        columns,
        rows,
        truncated,
    })
}
