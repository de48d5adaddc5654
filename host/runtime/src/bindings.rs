//! Host-side bindings for the `cordon:tool/plugin` world in `wit/tool.wit`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "plugin",
    exports: { default: async },
    imports: {
        // A stale handle traps the call instead of panicking the host.
        "cordon:tool/bulk-read.[constructor]reader": trappable,
        "cordon:tool/bulk-read.[method]reader.add": trappable,
        "cordon:tool/bulk-read.[method]reader.queued": trappable,
        "cordon:tool/bulk-read.[static]reader.sifting": trappable,
        // Wait for the host's reader threads without holding up others.
        "cordon:tool/bulk-read.[method]reader.take": async | trappable,
        "cordon:tool/bulk-read.[method]reader.take-sifted": async | trappable,
    },
    with: { "cordon:tool/bulk-read.reader": crate::bulk_read::Reader },
});

/// The optional `cordon:tool/tool-outputs` export (WIT 0.1.3, world `plugin-with-outputs`).
///
/// Kept apart from the `plugin` bindings because a component need not export it: a plugin is
/// linked through `plugin`, and this interface's functions are looked up in each component
/// separately ([`tool_outputs::GuestIndices::new`] fails for a component without it). The
/// shared interfaces are the `plugin` bindings' own, so their types are the same Rust types.
pub(crate) mod outputs {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "plugin-with-outputs",
        exports: { default: async },
        with: {
            "cordon:tool/types": crate::bindings::cordon::tool::types,
            "cordon:tool/log": crate::bindings::cordon::tool::log,
            "cordon:tool/bulk-read": crate::bindings::cordon::tool::bulk_read,
            "cordon:tool/result-stream": crate::bindings::cordon::tool::result_stream,
            "cordon:tool/grant-wanted": crate::bindings::cordon::tool::grant_wanted,
        },
    });

    pub(crate) use exports::cordon::tool::tool_outputs;
}
