//! The runtime's integration tests, one binary (each binary links wasmtime, which is slow).
//!
//! Tests share the process: those that measure or change the whole process (its peak memory,
//! its threads, a process-wide counter, its environment) or keep a core busy take
//! [`common::alone`], every other test [`common::shared`].

mod common;

mod bulk_read;
mod fresh_listing;
mod fs_escape;
mod listing;
mod load;
mod log_alias;
mod net_env;
mod pipe_race;
mod report;
mod runaway;
mod typed;
mod written;
