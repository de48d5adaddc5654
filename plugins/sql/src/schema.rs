//! `sql_schema`: what a model needs to write correct SQL against a database.

use cordon_sdk::{Json, ToolError};
use rusqlite::Connection;
use serde_json::{Value, json};

use crate::args::SchemaArgs;
use crate::db::{open_read, resolve_database, sqlite_error};
use crate::value::to_json;

/// Beyond this many matching tables only names are listed, to keep the answer readable.
const MAX_DESCRIBED: usize = 100;

fn q(conn: &Connection, sql: &str, arg: &str) -> Result<Vec<Vec<Value>>, ToolError> {
    let err = |e: rusqlite::Error| sqlite_error("", &e);
    let mut stmt = conn.prepare(sql).map_err(err)?;
    let width = stmt.column_count();
    let mut rows = stmt.query([arg]).map_err(err)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err)? {
        let mut values = Vec::with_capacity(width);
        for i in 0..width {
            values.push(to_json(row.get_ref(i).map_err(err)?));
        }
        out.push(values);
    }
    Ok(out)
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn describe(conn: &Connection, name: &str, kind: &str) -> Result<Value, ToolError> {
    let columns: Vec<Value> = q(
        conn,
        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)",
        name,
    )?
    .into_iter()
    .map(|c| {
        let mut col = json!({ "name": c[0], "type": c[1] });
        if c[2] == json!(1) {
            col["not_null"] = json!(true);
        }
        if !c[3].is_null() {
            col["default"] = c[3].clone();
        }
        if c[4].as_i64().unwrap_or(0) > 0 {
            col["primary_key"] = json!(true);
        }
        col
    })
    .collect();
    let mut table = json!({ "name": name, "type": kind, "columns": columns });
    if kind == "table" {
        let mut indexes = Vec::new();
        for idx in q(
            conn,
            "SELECT name, \"unique\", origin FROM pragma_index_list(?1) ORDER BY name",
            name,
        )? {
            let idx_name = idx[0].as_str().unwrap_or_default().to_owned();
            let cols: Vec<Value> = q(
                conn,
                "SELECT name FROM pragma_index_info(?1) ORDER BY seqno",
                &idx_name,
            )?
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
            indexes.push(json!({
                "name": idx_name,
                "unique": idx[1] == json!(1),
                "columns": cols,
                "origin": idx[2],
            }));
        }
        table["indexes"] = json!(indexes);
        let fks: Vec<Value> = q(
            conn,
            "SELECT \"from\", \"table\", \"to\" FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
            name,
        )?
        .into_iter()
        .map(|f| json!({ "column": f[0], "references_table": f[1], "references_column": f[2] }))
        .collect();
        if !fks.is_empty() {
            table["foreign_keys"] = json!(fks);
        }
        let count: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {}", quote_ident(name)),
                [],
                |r| r.get(0),
            )
            .map_err(|e| sqlite_error("", &e))?;
        table["rows"] = json!(count);
    }
    Ok(table)
}

fn matches(conn: &Connection, name: &str, words: &[String]) -> Result<bool, ToolError> {
    if words.is_empty() {
        return Ok(true);
    }
    let mut haystack = name.to_lowercase();
    for c in q(conn, "SELECT name FROM pragma_table_info(?1)", name)? {
        haystack.push(' ');
        haystack.push_str(&c[0].as_str().unwrap_or_default().to_lowercase());
    }
    Ok(words.iter().any(|w| haystack.contains(w.as_str())))
}

pub fn run(mut args: SchemaArgs) -> Result<Json<Value>, ToolError> {
    args.database = resolve_database(&args.database)?;
    let conn = open_read(&args.database)?;
    let words: Vec<String> = args
        .filter
        .as_deref()
        .unwrap_or("")
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let objects = q(
        &conn,
        "SELECT name, type FROM sqlite_schema WHERE type IN ('table', 'view') \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND ?1 = ?1 ORDER BY type, name",
        "",
    )?;
    let total = objects.len();
    let mut described = Vec::new();
    let mut only_named = Vec::new();
    for o in &objects {
        let (name, kind) = (
            o[0].as_str().unwrap_or_default(),
            o[1].as_str().unwrap_or_default(),
        );
        if !matches(&conn, name, &words)? {
            continue;
        }
        if described.len() < MAX_DESCRIBED {
            described.push(describe(&conn, name, kind)?);
        } else {
            only_named.push(json!(name));
        }
    }
    let mut out = json!({
        "database": args.database,
        "tables_total": total,
        "tables": described,
    });
    if !words.is_empty() {
        out["filter"] = json!(words);
        if out["tables"].as_array().is_some_and(Vec::is_empty) {
            out["note"] = json!(
                "no table or column name contains the filter words; call without `filter` to list everything"
            );
        }
    }
    if !only_named.is_empty() {
        out["more_tables"] = json!(only_named);
        out["note"] = json!(format!(
            "only the first {MAX_DESCRIBED} tables are described; pass `filter` to describe the others"
        ));
    }
    Ok(Json(out))
}
