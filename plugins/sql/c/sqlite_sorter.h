/*
 * Included before every C file compiled for the plugins (CFLAGS in the Makefile); it acts only
 * where CORDON_DIRECT_SORTER_COMPARE is defined, which LIBSQLITE3_FLAGS does for SQLite alone.
 *
 * SQLite's sorter (GROUP BY, ORDER BY, DISTINCT and index builds over unindexed columns)
 * compares records through a function pointer, `pTask->xCompare`, set once per sort to one of a
 * few comparators. Natively an indirect call is cheap. As WebAssembly under wasmtime each one is
 * a `call_indirect` (table bounds, lazy-initialisation and signature checks) into a function
 * whose prologue checks the stack limit and the epoch deadline, saves five registers and spills
 * its arguments, around a comparison of a few bytes; a GROUP BY over 200k rows makes 3.4 million
 * of them. Here the three call sites compare the pointer with the two comparators SQLite picks
 * for single-column text and integer keys and call those directly, and the two are inlined there;
 * every other key (several columns, collations, reals) still goes through the pointer. Same
 * functions, same arguments, same results: only the call changes. Counted with valgrind's
 * callgrind on `cordon call` of that GROUP BY: 1,482 million instructions before, 1,277 million
 * after (-14%); timed, 184 -> 144 ms (medians of 60 interleaved runs).
 *
 * How: SQLite's three call sites read `pTask->xCompare(pTask, ...)` (checked for the SQLite of
 * libsqlite3-sys 0.39.1, SQLite 3.54.1). A function-like macro named `xCompare` turns each into
 *     pTask->xCompare == vdbeSorterCompareText ? (vdbeSorterCompareText)(pTask, ...)
 *       : (pTask)->xCompare == vdbeSorterCompareInt ? (vdbeSorterCompareInt)(pTask, ...)
 *       : (pTask)->xCompare(pTask, ...)
 * which parses as the call did on the right of `res =`, the only place SQLite calls it. The
 * macro is not expanded again inside its own expansion, so the last branch is the real
 * pointer call; every other `xCompare` in SQLite (a struct field, collation callbacks) is not
 * followed by `(` and stays untouched. A second pair of macros adds `always_inline` to the two
 * comparators' definitions (the only place their names are followed by `(`; the calls above
 * parenthesise the name to stay clear of it): clang does not inline them otherwise.
 *
 * On a SQLite update: if the call sites change shape this stops applying (slower, not wrong)
 * or fails to compile; check the sorter's calls in the new sqlite3.c and a callgrind count.
 */
#ifdef CORDON_DIRECT_SORTER_COMPARE
#define xCompare(task, cached, key1, len1, key2, len2)                                      \
    xCompare == vdbeSorterCompareText                                                       \
        ? (vdbeSorterCompareText)(task, cached, key1, len1, key2, len2)                     \
    : (task)->xCompare == vdbeSorterCompareInt                                              \
        ? (vdbeSorterCompareInt)(task, cached, key1, len1, key2, len2)                      \
        : (task)->xCompare(task, cached, key1, len1, key2, len2)
#define vdbeSorterCompareText(...) \
    __attribute__((always_inline)) vdbeSorterCompareText(__VA_ARGS__)
#define vdbeSorterCompareInt(...) __attribute__((always_inline)) vdbeSorterCompareInt(__VA_ARGS__)
#endif
