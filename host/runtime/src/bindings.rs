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
