//! Cordon's bundled `sql` tool: inspect, query and (with a read-write grant) change SQLite
//! databases that live inside the directories granted to the plugin.
//!
//! SQLite is compiled into the component, so nothing on the host runs. Reads open the file
//! read-only and immutable (the sandboxed SQLite cannot take locks that a read-only grant
//! would allow), and a query is refused unless SQLite itself reports the statement as
//! read-only. Writes open the file read-write; a read-only grant makes the filesystem refuse
//! that, which is reported as `denied`.

mod args;
mod db;
mod execute;
#[cfg(test)]
mod memcmp;
mod query;
mod schema;
mod tempfiles;
mod value;

use cordon_sdk::{Hints, Plugin, export_plugin};

pub use args::{ExecuteArgs, QueryArgs, SchemaArgs};

/// The three tools, in the order models see them.
pub fn plugin() -> Plugin {
    Plugin::new()
        .structured_tool(
            "sql_schema",
            "Describes a SQLite database: its tables and views with columns and types, \
             indexes, foreign keys and row counts. Call this first to learn table and column \
             names before writing SQL. In a large database pass `filter` (words matched \
             against table and column names) to see only the relevant tables.",
            Hints::READ_ONLY,
            schema::run,
        )
        .written_tool(
            "sql_query",
            "Runs one read-only SQL statement (SELECT, WITH, read-only PRAGMA, EXPLAIN) on a \
             SQLite database and returns the column names and rows as JSON. Pass values through \
             `params` (`?` placeholders, or `:name` with an object) instead of quoting them \
             into the SQL. At most `max_rows` rows and about `max_bytes` bytes are returned; \
             `truncated` says when more rows exist, so add LIMIT/OFFSET or aggregate instead. \
             A large result may come as a preview that the host lets you page through. \
             Statements that write are refused: use sql_execute for those.",
            Hints::READ_ONLY,
            query::run,
        )
        .structured_tool(
            "sql_execute",
            "Changes a SQLite database: INSERT, UPDATE, DELETE, CREATE, ALTER, DROP. Runs one \
             statement with `params`, or without params a script of several statements \
             separated by `;` in a single transaction (all or nothing). Returns the number of \
             changed rows. Only works where the user granted read-write access; a read-only \
             grant makes it fail with `denied`.",
            Hints::DESTRUCTIVE,
            execute::run,
        )
}

export_plugin!(plugin);
