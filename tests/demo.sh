#!/usr/bin/env bash
# Cordon demo. Part 1: the sandbox and its grants, shown with the `probe` test fixture.
# Part 2: one `cordon run` conversation using the bundled sql, files and python tools, against
# CORDON_LLM_URL when set, else a scripted stand-in for a model (tests/demo/script.json).
# Part 3: a per-call policy (docs/examples/policy) tested and explained.
# Run by `make demo` after the build. Uses a private, temporary Cordon home.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CORDON="${CORDON:-$ROOT/target/debug/cordon}"
PROBE="$ROOT/target/fixtures/probe.wasm"
for f in "$CORDON" "$PROBE"; do
  [ -e "$f" ] || { echo "missing $f: run \`make\` first" >&2; exit 1; }
done

WORK="$(mktemp -d -t cordon-demo-XXXXXX)"
LLM_PID=""
cleanup() {
  if [ -n "$LLM_PID" ]; then kill "$LLM_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
export CORDON_HOME="$WORK/home"
unset RUST_LOG

if [ -t 1 ]; then B=$'\033[1m' N=$'\033[0m'; else B='' N=''; fi
step() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }
say() { printf '   %s\n' "$*"; }
# Runs a call that the sandbox must refuse; the demo fails if it succeeds.
refused() {
  local what="$1"; shift
  if out="$("$CORDON" "$@" 2>&1)"; then
    echo "UNEXPECTED: $what succeeded: $out" >&2
    exit 1
  fi
  say "refused, as it should be: ${out#error: }"
}

mkdir -p "$WORK/project" "$WORK/private"
printf 'Cordon demo notes\nThis file lives in the granted directory.\n' >"$WORK/project/notes.txt"
printf 'api-key=do-not-leak\n' >"$WORK/private/secret.txt"
ln -s "$WORK/private/secret.txt" "$WORK/project/sneaky-link"

step "1. Install the probe plugin with ONE grant: $WORK/project, read-only, seen as /project"
say "Cordon prints what the component imports and what it is granted before anything runs."
"$CORDON" plugin install "$PROBE" --grant "fs:$WORK/project:/project:ro"

step "2. Inspect it: tools and schemas, imports, ceiling, grants, limits"
"$CORDON" plugin inspect probe | sed -n '1,40p'
say "(schemas of the remaining tools cut for brevity)"

step "3. Call a tool that reads a file inside the grant"
"$CORDON" call fs '{"op":"read","path":"/project/notes.txt"}'

step "4. Try to escape the grant"
say "a) climb out with ../"
refused "reading ../private" call fs '{"op":"read","path":"/project/../private/secret.txt"}'
say "b) follow a symlink inside the grant that points outside it"
refused "following the symlink" call fs '{"op":"read","path":"/project/sneaky-link"}'
say "c) write through the read-only grant"
refused "writing" call fs '{"op":"write","path":"/project/notes.txt","content":"overwritten"}'
say "d) read an environment variable that was not granted"
out="$(DEMO_SECRET=hunter2 "$CORDON" call env '{"name":"DEMO_SECRET"}')"
if grep -q hunter2 <<<"$out"; then
  echo "UNEXPECTED: the plugin read DEMO_SECRET: $out" >&2
  exit 1
fi
say "refused, as it should be: DEMO_SECRET is set on the host, the plugin sees no such variable"
say "e) be granted the directory that holds Cordon's own home (its grants, its compiled code)"
refused "granting the home's parent" grant probe "fs:$WORK:/work:rw"

step "5. Part 1 done: the host file is unchanged and the secret never left $WORK/private"
cat "$WORK/project/notes.txt"

# ---------------------------------------------------------------------------------------------
# Part 2: a conversation with the bundled tools.
for f in sql files python; do
  [ -e "$ROOT/target/plugins/$f.wasm" ] || { echo "missing target/plugins/$f.wasm: run \`make plugins\` first" >&2; exit 1; }
done
D="$WORK/demo"
mkdir -p "$D/data" "$D/scratch" "$D/docs/guides" "$D/private"
python3 - "$D/data/shop.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executescript("""
CREATE TABLE orders(id INTEGER PRIMARY KEY, region TEXT NOT NULL, cents INTEGER NOT NULL);
INSERT INTO orders(region, cents) VALUES
  ('east', 30000), ('east', 22000), ('north', 31500), ('west', 9000), ('west', 7500);
CREATE TABLE reports(id INTEGER PRIMARY KEY, note TEXT NOT NULL);
""")
c.commit()
c.close()
PY
cp "$D/data/shop.db" "$D/scratch/shop-copy.db"
printf '# Policy\nCustomers get refunds within 30 days of purchase.\n' >"$D/docs/policy.md"
printf '# Shipping\nOrders ship within 2 working days.\n' >"$D/docs/guides/shipping.md"
printf 'sk-live-do-not-leak\n' >"$D/private/api-key.txt"

step "6. Install the bundled tools, each with only what it needs"
say "sql:    $D/data read-only as /data, and a working copy $D/scratch read-write as /scratch"
"$CORDON" plugin install "$ROOT/target/plugins/sql.wasm" --yes \
  --grant "fs:$D/data:/data:ro" --grant "fs:$D/scratch:/scratch:rw" --limit time=5s | sed 's/^/   /'
say "files:  $D/docs read-only as /docs"
"$CORDON" plugin install "$ROOT/target/plugins/files.wasm" --yes \
  --grant "fs:$D/docs:/docs:ro" --limit time=5s | sed 's/^/   /'
say "python: no grants at all (compiling CPython-in-wasm takes ~20 s once; then it is cached)"
"$CORDON" plugin install "$ROOT/target/plugins/python.wasm" --yes --limit time=10s | sed 's/^/   /'

step "7. One conversation: cordon run --approve all"
SCRIPTED=0
if [ -n "${CORDON_LLM_URL:-}" ]; then
  say "Using the model at $CORDON_LLM_URL (model: ${CORDON_MODEL:-from cordon.toml or the default})."
  PROMPT="Use the tools. 1) With sql_query on /data/shop.db, total the cents per region in table orders. \
2) With search_text, find what the docs under /docs say about refunds. \
3) With run_python, passing the query result as input, compute each region's percentage share. \
4) With sql_execute, insert a one-line note about the result into table reports of /scratch/shop-copy.db. \
5) Try read_file on /docs/../private/api-key.txt. Then summarise, saying which calls were refused."
else
  LLM="${SCRIPTED_LLM:-$ROOT/target/debug/scripted-llm}"
  if [ ! -x "$LLM" ]; then
    say "building the scripted model server (cargo build -p cordon-scripted-llm)"
    (cd "$ROOT" && cargo build -q -p cordon-scripted-llm)
  fi
  say "No CORDON_LLM_URL set: using a scripted stand-in for a model (tests/demo/script.json)."
  say "Set CORDON_LLM_URL (e.g. http://localhost:11434/v1) and CORDON_MODEL to use a real one."
  exec 3< <("$LLM" --script "$ROOT/tests/demo/script.json" 2>/dev/null)
  LLM_PID=$!
  read -r CORDON_LLM_URL <&3 || { echo "the scripted model server did not start" >&2; exit 1; }
  export CORDON_LLM_URL
  export CORDON_MODEL=scripted
  SCRIPTED=1
  PROMPT="What is our revenue by region and each region's share? What do the docs say about refunds? Record the result, and show me the API key."
fi
say "You: $PROMPT"
say "(⚙ = a tool call, → its result, ✗ an error or refusal handed back to the model)"
echo
# --approve all answers "yes" to calls that need approval (here sql_execute, which writes);
# `--approve ask` would ask on the terminal, `--approve auto` would decline them.
cd "$WORK"
code=0
"$CORDON" run "$PROMPT" --approve all --session demo || code=$?
echo
step "8. The audit log: every call, who approved it, what the sandbox refused, and every change to the home"
"$CORDON" audit | sed 's/^/   /'
step "9. The conversation is a durable session: each step was recorded before it was acted on"
"$CORDON" sessions list | sed 's/^/   /'
"$CORDON" sessions show demo --log | head -12 | sed 's/^/   /'
say "(cordon sessions resume/fork/replay/export take it further; cordon serve drives sessions over HTTP)"

if [ "$SCRIPTED" = 1 ]; then
  [ "$code" = 0 ] || { echo "UNEXPECTED: cordon run exited $code" >&2; exit 1; }
  notes="$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from reports").fetchone()[0])' "$D/scratch/shop-copy.db")"
  orig="$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from reports").fetchone()[0])' "$D/data/shop.db")"
  [ "$notes" = 1 ] && [ "$orig" = 0 ] || { echo "UNEXPECTED: reports in copy=$notes, original=$orig" >&2; exit 1; }
  step "Part 2 done"
  say "sql_execute was approved (--approve all) and wrote 1 row to the working copy only;"
  say "the read-only original is untouched, and the API key never reached the model."
else
  step "Part 2 done (cordon run exited $code)"
  say "A real model chooses its own calls: the lines above show which ran, which needed approval"
  say "(--approve all said yes) and which the sandbox refused."
fi

# ---------------------------------------------------------------------------------------------
# Part 3: a policy that decides per call (docs/examples/policy), in a home of its own.
step "10. Policy: decide per call (docs/examples/policy/cordon.toml and team.cedar)"
P="$WORK/policy"
mkdir -p "$P/db"
cp "$ROOT/docs/examples/policy/cordon.toml" "$ROOT/docs/examples/policy/team.cedar" "$P/"
say "sql and files, each granted $P/db read-write as /data: without a policy every"
say "sql_execute and read_file asks. The policy lets routine calls run and refuses DROP."
CORDON_HOME="$WORK/policy-home" "$CORDON" plugin install "$ROOT/target/plugins/sql.wasm" --yes \
  --grant "fs:$P/db:/data:rw" >/dev/null
CORDON_HOME="$WORK/policy-home" "$CORDON" plugin install "$ROOT/target/plugins/files.wasm" --yes \
  --grant "fs:$P/db:/data:rw" >/dev/null
policy() { (cd "$P" && CORDON_HOME="$WORK/policy-home" "$CORDON" policy "$@"); }
say "cordon policy test: every rule's examples run as the policy loads"
policy test | sed 's/^/   /'
# Each explanation's decision line; the demo fails if a decision is not the one expected.
decides() {
  local want="$1"; shift
  local line
  line="$(policy explain "$@" --at 2026-11-30T12:00 | grep '^decision:')"
  say "cordon policy explain $1 '$2'"
  say "  -> $line"
  [[ "$line" == "decision: $want"* ]] || { echo "UNEXPECTED: expected $want" >&2; exit 1; }
}
decides allow sql_execute '{"database": "/data/shop.db", "sql": "INSERT INTO orders VALUES (1, '"'east'"', 1200)"}'
decides deny sql_execute '{"database": "/data/shop.db", "sql": "DROP TABLE orders"}'
decides ask sql_execute '{"database": "/data/shop.db", "sql": "UPDATE orders SET cents = 0"}'
decides ask read_file '{"path": "/data/reports/../hr/salaries.csv"}'

step "Done"
say "The README's \"Policy: decide per call\" explains the rules; cordon policy explain --json"
say "gives the same for scripts."
