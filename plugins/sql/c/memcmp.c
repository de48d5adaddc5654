/*
 * A word-at-a-time memcmp for the sql component.
 *
 * wasi-libc's memcmp is musl's byte loop. Compiled to WebAssembly and run by wasmtime, every
 * byte costs a loop iteration with an epoch (time-limit) check and register spills; SQLite's
 * sorter and b-tree compare keys with memcmp, so a GROUP BY over 200k rows spent 12% of its
 * time there. This version compares 8 (then 4) bytes at a time (unaligned loads are fine in
 * wasm) and finds the first differing byte from the lowest set bit of the XOR (`ctz` is one
 * wasm instruction; loads are little-endian, so the lowest differing bit is in the first
 * differing byte).
 *
 * Built with -fno-builtin so the compiler never turns this body back into a memcmp call.
 */
#include <stddef.h>
#include <stdint.h>

int cordon_memcmp(const void *left, const void *right, size_t n) {
    const unsigned char *l = left;
    const unsigned char *r = right;
    while (n >= 8) {
        uint64_t a, b;
        __builtin_memcpy(&a, l, 8);
        __builtin_memcpy(&b, r, 8);
        if (a != b) {
            size_t at = (size_t)__builtin_ctzll(a ^ b) >> 3;
            return l[at] - r[at];
        }
        l += 8;
        r += 8;
        n -= 8;
    }
    if (n >= 4) {
        uint32_t a, b;
        __builtin_memcpy(&a, l, 4);
        __builtin_memcpy(&b, r, 4);
        if (a != b) {
            size_t at = (size_t)__builtin_ctz(a ^ b) >> 3;
            return l[at] - r[at];
        }
        l += 4;
        r += 4;
        n -= 4;
    }
    for (; n; n--, l++, r++) {
        if (*l != *r) {
            return *l - *r;
        }
    }
    return 0;
}

#if defined(__wasm__)
/* Replaces libc's memcmp in the component: the linker takes this definition and never pulls
 * musl's memcmp.o out of libc.a. Native builds (tests) keep the platform's memcmp and call
 * cordon_memcmp directly. */
int memcmp(const void *left, const void *right, size_t n) {
    return cordon_memcmp(left, right, n);
}
#endif
