/*
 * Included before every C file compiled for the plugins (CFLAGS in the Makefile); it acts only
 * where CORDON_INLINE_MEM is defined, which LIBSQLITE3_FLAGS does for SQLite alone.
 *
 * SQLite calls memcmp and memcpy millions of times with a few bytes each (sort keys, record
 * fields). As WebAssembly under wasmtime every call pays a fixed ~30 instructions around the
 * comparison itself: the stack-limit and epoch checks and saving the registers that the
 * epoch check's slow path needs. Inlined at SQLite's call sites, a GROUP BY over 200k rows runs
 * 13% fewer instructions than with them called (valgrind --tool=callgrind on `cordon call`).
 */
#ifdef CORDON_INLINE_MEM
#include <string.h>
#include "mem.h"
#define memcmp(left, right, n) compare_bytes((left), (right), (n))
#define memcpy(dest, src, n) copy_bytes((dest), (src), (n))
#endif
