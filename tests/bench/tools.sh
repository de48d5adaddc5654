#!/usr/bin/env bash
# Benchmarks the bundled tools against the native programs doing the same job, in one run, and
# prints medians and ratios, two ways:
#  - `cordon call` against the native program (hyperfine; whole-process wall time on both sides,
#    so Cordon's figure includes starting the binary, loading the component from the compile
#    cache, instantiating it and validating the arguments);
#  - the same call served by a running host (host_calls example), as a model's call is.
#
# For the SQL queries, also the same call through a bare wasmtime host (bare_call: no Cordon,
# nothing but loading, instantiating and calling the component), the floor for any sandbox
# started per call.
#
#   CORDON=target/release/cordon HOST_CALLS=target/release/examples/host_calls \
#     BARE_CALL=target/release/examples/bare_call PLUGINS=target/plugins bash tests/bench/tools.sh
set -euo pipefail

CORDON=${CORDON:-target/release/cordon}
PLUGINS=${PLUGINS:-target/plugins}
RUNS=${RUNS:-15}
PER_ROUND=3
ROUNDS=$(( (RUNS + PER_ROUND - 1) / PER_ROUND ))
HOST_CALLS=${HOST_CALLS:-target/release/examples/host_calls}
BARE_CALL=${BARE_CALL:-target/release/examples/bare_call}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv

for tool in hyperfine rg sqlite3 python3; do
  command -v "$tool" >/dev/null || { echo "bench needs $tool on PATH (make bench installs it)" >&2; exit 2; }
done
[ -x "$CORDON" ] || { echo "no cordon binary at $CORDON: run make bench" >&2; exit 2; }
[ -x "$HOST_CALLS" ] || { echo "no host_calls benchmark at $HOST_CALLS: run make bench" >&2; exit 2; }
[ -x "$BARE_CALL" ] || { echo "no bare_call host at $BARE_CALL: run make bench" >&2; exit 2; }

# A large source tree that is on the machine anyway: the first candidate with >= 20k files.
pick_tree() {
  for dir in "${BENCH_TREE:-}" "$HOME/.cargo/registry/src" /root/.pyenv/versions/*/lib /usr/share; do
    [ -n "$dir" ] && [ -d "$dir" ] || continue
    if [ "$(find "$dir" -type f 2>/dev/null | head -n 20000 | wc -l)" -ge 20000 ]; then
      echo "$dir"; return
    fi
  done
  echo "no source tree with 20k files found; set BENCH_TREE" >&2; exit 2
}

# compare NAME NATIVE_CMD CORDON_CMD [BARE_CMD]: hyperfine the commands in alternating rounds
# (a shared machine's speed can drift by tens of percent within a minute; rounds spread the drift over all
# sides), record medians of all runs. BARE_CMD is the same call through bare_call, the least a
# WebAssembly host can do per process (see host/runtime/examples/bare_call.rs).
compare() {
  local name=$1 native=$2 cordon=$3 bare=${4:-} round
  local sides=(-n native "$native" -n cordon "$cordon")
  [ -n "$bare" ] && sides+=(-n bare "$bare")
  for round in $(seq "$ROUNDS"); do
    hyperfine -N --warmup 1 --runs "$PER_ROUND" --export-json "$work/$name.$round.json" \
      "${sides[@]}" >"$work/$name.log" 2>&1 \
      || { cat "$work/$name.log" >&2; exit 1; }
  done
  python3 - "$name" "$work/$name".*.json >>"$results" <<'PY'
import json, statistics, sys
times = {}
for path in sys.argv[2:]:
    for r in json.load(open(path))["results"]:
        times.setdefault(r["command"], []).extend(r["times"])
m = {k: statistics.median(v) for k, v in times.items()}
n, c = m["native"], m["cordon"]
b = m.get("bare")
bare = f'{b*1000:.1f}\t{b/n:.2f}\t{c/b:.2f}' if b else '-\t-\t-'
print(f'{sys.argv[1]}\t{n*1000:.1f}\t{c*1000:.1f}\t{c/n:.2f}\t{bare}')
PY
}

install() { # home plugin grant...
  local home=$1 wasm=$2; shift 2
  local grants=()
  for g in "$@"; do grants+=(--grant "$g"); done
  "$CORDON" --home "$home" plugin install "$wasm" "${grants[@]}" --yes >/dev/null
}

# --- search_text vs rg -----------------------------------------------------------------------
tree=$(pick_tree)
files=$(find "$tree" -type f | wc -l)
install "$work/h-files" "$PLUGINS/files.wasm" "fs:$tree:/src:ro"
pattern='unsafe impl Send for'
compare search_text \
  "rg -n -F '$pattern' $tree" \
  "$CORDON --home $work/h-files call search_text '{\"pattern\":\"$pattern\",\"path\":\"/src\",\"literal\":true,\"max_matches\":5000}'"

# --- sql_query vs sqlite3 --------------------------------------------------------------------
mkdir -p "$work/db"
python3 - "$work/db/bench.db" <<'PY'
import random, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, category TEXT, price REAL, sku TEXT)")
rnd = random.Random(7)
db.executemany("INSERT INTO items VALUES (?,?,?,?)",
               ((i, f"cat{rnd.randrange(40)}", rnd.random() * 100, f"sku-{i:07d}") for i in range(200_000)))
db.execute("CREATE INDEX items_sku ON items(sku)")
db.commit()
PY
install "$work/h-sql" "$PLUGINS/sql.wasm" "fs:$work/db:/data:ro"
agg='SELECT category, count(*), avg(price) FROM items GROUP BY category ORDER BY category'
lookup="SELECT * FROM items WHERE sku = 'sku-0123456'"
# The bare host compiles the component on its first call; that call also checks it answers.
bare="$BARE_CALL $PLUGINS/sql.wasm $work/sql.cwasm $work/db /data sql_query"
$bare "{\"database\":\"/data/bench.db\",\"sql\":\"$lookup\"}" | grep -q sku-0123456 \
  || { echo "bare_call did not answer the lookup" >&2; exit 1; }
compare sql_aggregate \
  "sqlite3 -readonly $work/db/bench.db '$agg'" \
  "$CORDON --home $work/h-sql call sql_query '{\"database\":\"/data/bench.db\",\"sql\":\"$agg\"}'" \
  "$bare '{\"database\":\"/data/bench.db\",\"sql\":\"$agg\"}'"
lookup_args='{"database":"/data/bench.db","sql":"SELECT * FROM items WHERE sku = ?","params":["sku-0123456"]}'
compare sql_lookup \
  "sqlite3 -readonly $work/db/bench.db \"$lookup\"" \
  "$CORDON --home $work/h-sql call sql_query '$lookup_args'" \
  "$bare '$lookup_args'"

# --- run_python vs python3 -------------------------------------------------------------------
# The real interpreter, not a wrapper on PATH (pyenv's shim is a shell script that costs
# 100 ms): the system one when there is one, as it starts fastest, else whatever python3 is.
if [ -x /usr/bin/python3 ]; then
  python=/usr/bin/python3
else
  python=$(python3 -c 'import sys; print(sys.executable)')
fi
install "$work/h-py" "$PLUGINS/python.wasm"
compare run_python "$python -c 'print(1+1)'" \
  "$CORDON --home $work/h-py call run_python '{\"code\":\"print(1+1)\"}'"

echo
echo "search tree: $tree ($files files); python: $python"
echo "cordon call, one process per call (start, load from cache, instantiate, validate, call) vs native;"
echo "bare: the same call through a bare wasmtime host per process (the floor for any sandbox started per call)"
echo "medians of $((ROUNDS * PER_ROUND)) runs in $ROUNDS alternating rounds, wall time of the whole process"
printf '%-14s %10s %10s %7s %10s %11s %13s\n' benchmark native_ms cordon_ms ratio bare_ms bare/native cordon/bare
while IFS=$'\t' read -r name native cordon ratio bare bare_ratio over_bare; do
  printf '%-14s %10s %10s %7s %10s %11s %13s\n' "$name" "$native" "$cordon" "$ratio" "$bare" "$bare_ratio" "$over_bare"
done <"$results"

# The same work as a tool call served by a running host (what a model's call costs in
# `cordon chat`/`cordon run`), against a native process per call. Like the CLI, the benchmark
# turns off backtrace capture for library errors, which wasmtime-wasi would otherwise take on
# every "file not found" when RUST_BACKTRACE is set.
RUST_LIB_BACKTRACE=0 "$HOST_CALLS" --plugins "$PLUGINS" --db "$work/db/bench.db" --tree "$tree" \
  --python "$python" --runs "$RUNS"
