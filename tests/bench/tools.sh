#!/usr/bin/env bash
# Benchmarks the bundled tools against the native programs doing the same job, in one run, and
# prints medians and ratios (hyperfine; whole-process wall time on both sides, so Cordon's figure
# includes starting the binary, loading the component from the compile cache, instantiating it
# and validating the arguments).
#
#   CORDON=target/release/cordon PLUGINS=target/plugins bash tests/bench/tools.sh
set -euo pipefail

CORDON=${CORDON:-target/release/cordon}
PLUGINS=${PLUGINS:-target/plugins}
RUNS=${RUNS:-15}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv

for tool in hyperfine rg sqlite3 python3; do
  command -v "$tool" >/dev/null || { echo "bench needs $tool on PATH (make bench installs it)" >&2; exit 2; }
done
[ -x "$CORDON" ] || { echo "no cordon binary at $CORDON: run make bench" >&2; exit 2; }

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

# compare NAME NATIVE_CMD CORDON_CMD: hyperfine both, record medians.
compare() {
  local name=$1 native=$2 cordon=$3
  hyperfine -N --warmup 2 --runs "$RUNS" --export-json "$work/$name.json" \
    -n native "$native" -n cordon "$cordon" >"$work/$name.log" 2>&1 \
    || { cat "$work/$name.log" >&2; exit 1; }
  python3 - "$work/$name.json" "$name" >>"$results" <<'PY'
import json, sys
data = {r["command"]: r["median"] for r in json.load(open(sys.argv[1]))["results"]}
print(f'{sys.argv[2]}\t{data["native"]*1000:.1f}\t{data["cordon"]*1000:.1f}\t{data["cordon"]/data["native"]:.2f}')
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
compare sql_aggregate \
  "sqlite3 -readonly $work/db/bench.db '$agg'" \
  "$CORDON --home $work/h-sql call sql_query '{\"database\":\"/data/bench.db\",\"sql\":\"$agg\"}'"
lookup="SELECT * FROM items WHERE sku = 'sku-0123456'"
compare sql_lookup \
  "sqlite3 -readonly $work/db/bench.db \"$lookup\"" \
  "$CORDON --home $work/h-sql call sql_query '{\"database\":\"/data/bench.db\",\"sql\":\"SELECT * FROM items WHERE sku = ?\",\"params\":[\"sku-0123456\"]}'"

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
echo "medians of $RUNS runs, wall time of the whole process"
printf '%-14s %12s %12s %8s\n' benchmark native_ms cordon_ms ratio
while IFS=$'\t' read -r name native cordon ratio; do
  printf '%-14s %12s %12s %8s\n' "$name" "$native" "$cordon" "$ratio"
done <"$results"
