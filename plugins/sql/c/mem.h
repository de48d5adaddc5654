/*
 * The bodies of the sql component's memcmp and memcpy (see memcmp.c for why they exist), as
 * static inline functions: memcmp.c defines the component's memcmp and memcpy from them, and
 * sqlite_mem.h lets SQLite's own code inline them at its call sites.
 */
#ifndef CORDON_MEM_H
#define CORDON_MEM_H

#include <stddef.h>
#include <stdint.h>

/* Copies at or above this size go to memory.copy, whose fixed cost is a host call. */
#define BULK_COPY_FROM 128

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return v;
}

static inline uint32_t load32(const unsigned char *p) {
    uint32_t v;
    __builtin_memcpy(&v, p, 4);
    return v;
}

static inline void store64(unsigned char *p, uint64_t v) { __builtin_memcpy(p, &v, 8); }

static inline void store32(unsigned char *p, uint32_t v) { __builtin_memcpy(p, &v, 4); }

/* The order of two different little-endian words by their first differing byte. */
static inline int order64(uint64_t a, uint64_t b) {
    unsigned shift = (unsigned)__builtin_ctzll(a ^ b) & ~7u;
    return (int)((a >> shift) & 0xff) - (int)((b >> shift) & 0xff);
}

static inline int order32(uint32_t a, uint32_t b) {
    unsigned shift = (unsigned)__builtin_ctz(a ^ b) & ~7u;
    return (int)((a >> shift) & 0xff) - (int)((b >> shift) & 0xff);
}

/* More than 16 bytes: whole words up to the last one, then the last 8 bytes, which may overlap
 * words already found equal and so cannot change the first difference. Kept out of line: as
 * WebAssembly a function with a loop needs more registers, and Cranelift saves and restores
 * them on every call, also on the short paths that never loop. */
__attribute__((noinline)) static int compare_long(const unsigned char *l, const unsigned char *r,
                                                  size_t n) {
    for (size_t at = 0; at + 8 < n; at += 8) {
        uint64_t a = load64(l + at), b = load64(r + at);
        if (a != b) {
            return order64(a, b);
        }
    }
    uint64_t a = load64(l + n - 8), b = load64(r + n - 8);
    return a == b ? 0 : order64(a, b);
}

static inline __attribute__((always_inline)) int compare_bytes(const void *left,
                                                             const void *right, size_t n) {
    const unsigned char *l = left;
    const unsigned char *r = right;
    if (n >= 8) {
        if (n > 16) {
            return compare_long(l, r, n);
        }
        /* 8 to 16 bytes: the first and the last 8, overlapping for fewer than 16. */
        uint64_t a = load64(l), b = load64(r);
        if (a != b) {
            return order64(a, b);
        }
        a = load64(l + n - 8);
        b = load64(r + n - 8);
        return a == b ? 0 : order64(a, b);
    }
    if (n >= 4) {
        uint32_t a = load32(l), b = load32(r);
        if (a != b) {
            return order32(a, b);
        }
        a = load32(l + n - 4);
        b = load32(r + n - 4);
        return a == b ? 0 : order32(a, b);
    }
    if (n == 0) {
        return 0;
    }
    /* 1 to 3 bytes: first, middle and last byte, most significant first, compare in order. */
    int32_t a = (int32_t)((uint32_t)l[0] << 16 | (uint32_t)l[n >> 1] << 8 | l[n - 1]);
    int32_t b = (int32_t)((uint32_t)r[0] << 16 | (uint32_t)r[n >> 1] << 8 | r[n - 1]);
    return a - b;
}

/* 16 bytes or more: a word at a time and the overlapping last word, or memory.copy for large
 * copies. Out of line for the reason given at compare_long. */
__attribute__((noinline)) static void copy_long(unsigned char *restrict d,
                                                const unsigned char *restrict s, size_t n) {
#if defined(__wasm__)
    if (n >= BULK_COPY_FROM) {
        /* memory.copy: with bulk memory the compiler emits the instruction, not a call. */
        __builtin_memcpy(d, s, n);
        return;
    }
#endif
    /* Source and destination do not overlap (memcpy's contract), so rewriting bytes of the
     * last word that a loop store already wrote is harmless. */
    for (size_t at = 0; at + 8 < n; at += 8) {
        store64(d + at, load64(s + at));
    }
    store64(d + n - 8, load64(s + n - 8));
}

static inline __attribute__((always_inline)) void *copy_bytes(void *restrict dest,
                                                             const void *restrict src, size_t n) {
    unsigned char *d = dest;
    const unsigned char *s = src;
    if (n >= 16) {
        copy_long(d, s, n);
    } else if (n >= 8) {
        uint64_t first = load64(s), last = load64(s + n - 8);
        store64(d, first);
        store64(d + n - 8, last);
    } else if (n >= 4) {
        uint32_t first = load32(s), last = load32(s + n - 4);
        store32(d, first);
        store32(d + n - 4, last);
    } else if (n != 0) {
        unsigned char first = s[0], middle = s[n >> 1], last = s[n - 1];
        d[0] = first;
        d[n >> 1] = middle;
        d[n - 1] = last;
    }
    return dest;
}

#endif
