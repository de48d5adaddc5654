/*
 * memcmp and memcpy for the sql component.
 *
 * wasi-libc's are musl's C loops. Compiled to WebAssembly and run by wasmtime, every loop
 * iteration pays an epoch (time-limit) check, and the short lengths SQLite mostly passes
 * (sort keys and record fields of a few bytes) never reach word-sized steps. SQLite's sorter
 * and b-tree compare keys with memcmp and move records with memcpy: a GROUP BY over 200k rows
 * calls memcmp 3.6 million times and memcpy 1.4 million times, which took ~70 and ~80
 * instructions a call with this tool's earlier word-loop memcmp and wasi-libc's memcpy
 * (valgrind --tool=callgrind on `cordon call`).
 *
 * Here no length below 16 bytes loops at all: from 4 bytes on, two overlapping word loads from
 * each end (compares take 16 bytes that way too); 1 to 3 bytes are three byte loads (first,
 * middle, last). Longer runs go a word at a time and finish with one overlapping word. Words
 * are loaded little-endian (unaligned loads are fine in wasm), so the lowest set bit of
 * `a ^ b` lies in the first differing byte. Large copies use the `memory.copy` instruction
 * (bulk memory), one host call however long.
 *
 * Built with -fno-builtin so the compiler never turns these bodies back into calls to
 * themselves. The C standard only promises memcmp's sign, and that is all this one keeps.
 */
#include <stddef.h>

#if defined(__wasm__) && !defined(__wasm_bulk_memory__)
#error "build with -mbulk-memory: large copies must be memory.copy, not a call to memcpy"
#endif

#include "mem.h"

int cordon_memcmp(const void *left, const void *right, size_t n) {
    return compare_bytes(left, right, n);
}

void *cordon_memcpy(void *restrict dest, const void *restrict src, size_t n) {
    return copy_bytes(dest, src, n);
}

#if defined(__wasm__)
/* Replace libc's memcmp and memcpy in the component: the linker takes these definitions and
 * never pulls musl's memcmp.o and memcpy.o out of libc.a. Native builds (tests) keep the
 * platform's functions and call the cordon_ ones, the same bodies, directly. */
int memcmp(const void *left, const void *right, size_t n) {
    return compare_bytes(left, right, n);
}

void *memcpy(void *restrict dest, const void *restrict src, size_t n) {
    return copy_bytes(dest, src, n);
}
#endif
