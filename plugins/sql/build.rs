//! Compiles the component's word-at-a-time `memcmp` (see `c/memcmp.c`). In the wasm build it
//! replaces wasi-libc's byte loop for SQLite and Rust alike; natively it is only
//! `cordon_memcmp`, which the unit tests compare against slice ordering.

fn main() {
    println!("cargo:rerun-if-changed=c/memcmp.c");
    cc::Build::new()
        .file("c/memcmp.c")
        .opt_level(3)
        .flag("-fno-builtin")
        .warnings(true)
        .compile("cordon_memcmp");
}
