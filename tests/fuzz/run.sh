#!/usr/bin/env bash
# Runs AFL++ on fuzz targets, one after the other, each until it has made EXECS executions
# (or SECONDS_EACH seconds have passed, if set), and prints a Markdown table of what each did:
#   tests/fuzz/run.sh BINARY OUT EXECS TARGET...
# Findings stay in OUT/TARGET/default/crashes (and hangs); a crash found makes the exit
# status 1. A target whose OUT/TARGET holds an earlier run is resumed where it stopped (its
# executions go on counting); FUZZ_FRESH=1 starts every target over. Run by `make fuzz`.
set -euo pipefail
bin=$1 out=$2 execs=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
# A target that sets up once (the typed one compiles a component) does so before AFL++'s
# fork server starts; the defaults give it time.
export AFL_FORKSRV_INIT_TMOUT=${AFL_FORKSRV_INIT_TMOUT:-60000}
export CORDON_FUZZ_TYPED=${CORDON_FUZZ_TYPED:-$here/../../target/fixtures/typed.wasm}
limit=()
[ -n "${SECONDS_EACH:-}" ] && limit=(-V "$SECONDS_EACH")
found=0
rows=()
for t in "$@"; do
  input=("$here/corpus/$t")
  if [ -f "$out/$t/default/fuzzer_stats" ] && [ -z "${FUZZ_FRESH:-}" ]; then
    input=(-)
  else
    rm -rf "${out:?}/$t"
  fi
  mkdir -p "$out"
  # -t: a single input that takes over a second is a hang worth keeping.
  cargo afl fuzz -i "${input[@]}" -o "$out/$t" -E "$execs" "${limit[@]}" -t 1000 \
    -- "$bin" "$t" > "$out/$t.log" 2>&1 || { echo "afl-fuzz failed on $t: see $out/$t.log" >&2; tail -20 "$out/$t.log" >&2; exit 1; }
  stats="$out/$t/default/fuzzer_stats"
  get() { sed -n "s/^$1 *: *//p" "$stats"; }
  crashes=$(get saved_crashes)
  [ "$crashes" != 0 ] && found=1
  rows+=("| \`$t\` | $(get execs_done) | $(get run_time) s | $(get execs_per_sec) | $(get corpus_count) | $(get bitmap_cvg) | $crashes | $(get saved_hangs) |")
done
echo "| target | executions | time | per second | corpus | edges covered | crashes | hangs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
exit $found
