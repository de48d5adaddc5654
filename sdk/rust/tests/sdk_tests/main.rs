//! The SDK's integration tests, in one test binary.

mod api;
mod outside_tree;
mod wit_sync;
