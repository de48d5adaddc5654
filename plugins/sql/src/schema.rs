//! `sql_schema`: what a model needs to write correct SQL against a database.

use cordon_sdk::ToolError;
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::args::SchemaArgs;
use crate::db::{open_read, resolve_database, sqlite_error};
use crate::value::to_json;

/// Beyond this many matching tables only names are listed, to keep the answer readable.
const MAX_DESCRIBED: usize = 100;

/// What `sql_schema` returns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SchemaResult {
    /// The database file, as resolved inside the granted directories.
    pub database: String,
    /// How many tables and views the database has in all.
    pub tables_total: usize,
    /// The tables and views described (those matching `filter`, at most 100).
    pub tables: Vec<Table>,
    /// The filter words, lowercased; only when a filter was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<Vec<String>>,
    /// Names of further matching tables that are not described.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more_tables: Option<Vec<String>>,
    /// What to do to see more, when something was left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One table or view.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Table {
    /// Its name.
    pub name: String,
    /// `table` or `view`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its columns, in order.
    pub columns: Vec<Column>,
    /// Its indexes (tables only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexes: Option<Vec<Index>>,
    /// Its foreign keys (tables only, when it has any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreign_keys: Option<Vec<ForeignKey>>,
    /// How many rows it has (tables only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<i64>,
}

/// One column.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its declared type, as written in the schema (may be empty).
    #[serde(rename = "type")]
    pub declared_type: String,
    /// Present (true) when the column is NOT NULL.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub not_null: bool,
    /// Its default value as SQL text, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Present (true) when the column is part of the primary key.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub primary_key: bool,
}

/// One index.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Index {
    /// Its name.
    pub name: String,
    /// Whether it is UNIQUE.
    pub unique: bool,
    /// The indexed columns, in order (null for an indexed expression).
    pub columns: Vec<Option<String>>,
    /// How it was made: `c` (CREATE INDEX), `u` (UNIQUE constraint) or `pk` (primary key).
    pub origin: String,
}

/// One foreign key column.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ForeignKey {
    /// The column in this table.
    pub column: String,
    /// The table it refers to.
    pub references_table: String,
    /// The column it refers to (null: the other table's primary key).
    pub references_column: Option<String>,
}

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

/// A text value of a PRAGMA's result; `None` for NULL (numbers, which these columns do not
/// hold, as their text).
fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn describe(conn: &Connection, name: &str, kind: &str) -> Result<Table, ToolError> {
    let columns: Vec<Column> = q(
        conn,
        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)",
        name,
    )?
    .into_iter()
    .map(|c| {
        let mut c = c.into_iter();
        let mut next = || c.next().unwrap_or(Value::Null);
        let (name, declared_type, not_null, default, pk) = (next(), next(), next(), next(), next());
        Column {
            name: text(&name).unwrap_or_default(),
            declared_type: text(&declared_type).unwrap_or_default(),
            not_null: not_null == json!(1),
            default: text(&default),
            primary_key: pk.as_i64().unwrap_or(0) > 0,
        }
    })
    .collect();
    let mut table = Table {
        name: name.to_owned(),
        kind: kind.to_owned(),
        columns,
        indexes: None,
        foreign_keys: None,
        rows: None,
    };
    if kind == "table" {
        let mut indexes = Vec::new();
        for idx in q(
            conn,
            "SELECT name, \"unique\", origin FROM pragma_index_list(?1) ORDER BY name",
            name,
        )? {
            let idx_name = idx[0].as_str().unwrap_or_default().to_owned();
            let cols: Vec<Option<String>> = q(
                conn,
                "SELECT name FROM pragma_index_info(?1) ORDER BY seqno",
                &idx_name,
            )?
            .into_iter()
            .map(|r| text(&r[0]))
            .collect();
            indexes.push(Index {
                name: idx_name,
                unique: idx[1] == json!(1),
                columns: cols,
                origin: text(&idx[2]).unwrap_or_default(),
            });
        }
        table.indexes = Some(indexes);
        let fks: Vec<ForeignKey> = q(
            conn,
            "SELECT \"from\", \"table\", \"to\" FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
            name,
        )?
        .into_iter()
        .map(|f| ForeignKey {
            column: text(&f[0]).unwrap_or_default(),
            references_table: text(&f[1]).unwrap_or_default(),
            references_column: text(&f[2]),
        })
        .collect();
        if !fks.is_empty() {
            table.foreign_keys = Some(fks);
        }
        let count: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {}", quote_ident(name)),
                [],
                |r| r.get(0),
            )
            .map_err(|e| sqlite_error("", &e))?;
        table.rows = Some(count);
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

pub fn run(mut args: SchemaArgs) -> Result<SchemaResult, ToolError> {
    args.database = resolve_database(&args.database, false)?;
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
            only_named.push(name.to_owned());
        }
    }
    let mut out = SchemaResult {
        database: args.database,
        tables_total: total,
        tables: described,
        filter: None,
        more_tables: None,
        note: None,
    };
    if !words.is_empty() {
        if out.tables.is_empty() {
            out.note = Some(
                "no table or column name contains the filter words; call without `filter` to list everything"
                    .to_owned(),
            );
        }
        out.filter = Some(words);
    }
    if !only_named.is_empty() {
        out.more_tables = Some(only_named);
        out.note = Some(format!(
            "only the first {MAX_DESCRIBED} tables are described; pass `filter` to describe the others"
        ));
    }
    Ok(out)
}
