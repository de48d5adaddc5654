//! Argument types; their doc comments are the descriptions models read.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// Default and upper bound for `sql_query`'s `max_rows`.
pub const DEFAULT_MAX_ROWS: u32 = 200;
pub const LIMIT_MAX_ROWS: u32 = 1_000_000;
/// Default and upper bound for the approximate size of returned rows, in bytes of JSON.
pub const DEFAULT_MAX_BYTES: u32 = 256 * 1024;
/// Below the default output limit (64 MiB) by room for the column names and counts.
pub const LIMIT_MAX_BYTES: u32 = 60 * 1024 * 1024;

/// Arguments of `sql_schema`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchemaArgs {
    /// The database file, e.g. `/data/shop.db`.
    pub database: String,
    /// Words: only tables whose name or columns contain one are described.
    #[serde(default)]
    pub filter: Option<String>,
}

/// Arguments of `sql_query`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryArgs {
    /// The database file, e.g. `/data/shop.db`.
    pub database: String,
    /// One read-only statement, e.g. `SELECT name FROM customers WHERE id = ?`.
    pub sql: String,
    /// Placeholder values: an array for `?`, an object for `:name`.
    #[serde(default)]
    pub params: Option<Params>,
    /// Most rows to return (default 200).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_rows: Option<u32>,
    /// About how many bytes of rows to return (default 262144).
    #[serde(default)]
    #[schemars(range(min = 1, max = 62914560))]
    pub max_bytes: Option<u32>,
}

/// Arguments of `sql_execute`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    /// The database file, e.g. `/data/shop.db`.
    pub database: String,
    /// The statement, or without `params` several separated by `;`.
    pub sql: String,
    /// Placeholder values: an array for `?`, an object for `:name`.
    #[serde(default)]
    pub params: Option<Params>,
    /// Create the file if missing.
    #[serde(default)]
    pub create: bool,
}

/// Placeholder values: positional or named.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Params {
    /// Values for `?` placeholders, in order.
    Positional(Vec<Scalar>),
    /// Values for named placeholders.
    Named(BTreeMap<String, Scalar>),
}

/// One value bound to a placeholder. Booleans are stored as 1 and 0.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    /// SQL NULL.
    Null,
    /// Stored as 1 or 0.
    Bool(bool),
    /// A 64-bit integer.
    Integer(i64),
    /// A floating-point number.
    Real(f64),
    /// Text.
    Text(String),
}
