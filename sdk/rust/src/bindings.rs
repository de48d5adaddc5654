//! Bindings generated from `wit/tool.wit` (world `plugin`).
//!
//! Public so the `export_plugin!` macro can reach them from the plugin's crate; plugin
//! authors normally never touch this module.
#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    path: "../../wit",
    world: "plugin",
    pub_export_macro: true,
    export_macro_name: "export",
    default_bindings_module: "cordon_sdk::bindings",
    runtime_path: "cordon_sdk::__private::wit_bindgen::rt",
});
