//! Bindings generated from `wit/tool.wit` (world `plugin-with-outputs`: the `plugin` world plus
//! the `tool-outputs` export, through which structured tools state their output schemas).
//!
//! The WIT is this crate's own copy (`sdk/rust/wit`), so the SDK builds wherever it is copied;
//! `tests/wit_sync.rs` fails when it differs from the contract in the repository's `wit/`.
//!
//! Public so the `export_plugin!` macro can reach them from the plugin's crate; plugin
//! authors normally never touch this module.
#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    path: "wit",
    world: "plugin-with-outputs",
    pub_export_macro: true,
    export_macro_name: "export",
    default_bindings_module: "cordon_sdk::bindings",
    runtime_path: "cordon_sdk::__private::wit_bindgen::rt",
});
