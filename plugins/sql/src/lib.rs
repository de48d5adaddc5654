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
            "Describes a SQLite database's tables, columns, keys and row counts. Call it \
             before writing SQL.",
            Hints::READ_ONLY,
            schema::run,
        )
        .written_tool(
            "sql_query",
            "Runs one read-only SQL statement on a SQLite database and returns the rows \
             (`truncated` when there are more). Pass values in `params`.",
            Hints::READ_ONLY,
            query::run,
        )
        .structured_tool(
            "sql_execute",
            "Changes a SQLite database (INSERT, UPDATE, DELETE, CREATE, DROP…) in one \
             transaction; returns the number of changed rows.",
            Hints::DESTRUCTIVE,
            execute::run,
        )
}

export_plugin!(plugin);
