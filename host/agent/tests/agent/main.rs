//! The agent crate's integration tests, in one binary: one link instead of one per file.

mod chat;
mod driver;
