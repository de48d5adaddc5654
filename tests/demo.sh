#!/usr/bin/env bash
# Cordon demo, part 1: the sandbox and its grants, shown with the `probe` test fixture.
# Run by `make demo` after the build. Uses a private, temporary Cordon home.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CORDON="${CORDON:-$ROOT/target/debug/cordon}"
PROBE="$ROOT/target/fixtures/probe.wasm"
for f in "$CORDON" "$PROBE"; do
  [ -e "$f" ] || { echo "missing $f: run \`make\` first" >&2; exit 1; }
done

WORK="$(mktemp -d -t cordon-demo-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
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

step "Done: the host file is unchanged and the secret never left $WORK/private"
cat "$WORK/project/notes.txt"
