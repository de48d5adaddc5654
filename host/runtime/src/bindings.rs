//! Host-side bindings for the `cordon:tool/plugin` world in `wit/tool.wit`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "plugin",
    exports: { default: async },
});
