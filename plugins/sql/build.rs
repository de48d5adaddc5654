//! Compiles the component's own `memcmp` and `memcpy` (see `c/memcmp.c`). In the wasm build
//! they replace wasi-libc's loops for Rust and for SQLite (whose own calls inline the same
//! bodies, see `c/sqlite_mem.h`); natively they are only `cordon_memcmp` and `cordon_memcpy`,
//! which the unit tests check against Rust's own.

fn main() {
    // sqlite_mem.h and sqlite_sorter.h are SQLite's to include; the Makefile rebuilds SQLite when
    // they change.
    for file in ["c/memcmp.c", "c/mem.h"] {
        println!("cargo:rerun-if-changed={file}");
    }
    let mut build = cc::Build::new();
    build
        .file("c/memcmp.c")
        .opt_level(3)
        .flag("-fno-builtin")
        .warnings(true);
    if std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|arch| arch.starts_with("wasm")) {
        // Large copies become the `memory.copy` instruction (see the C file).
        build.flag("-mbulk-memory");
    }
    build.compile("cordon_memcmp");
}
