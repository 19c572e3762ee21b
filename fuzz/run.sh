#!/bin/sh
# Runs each fuzz target for SECONDS (default 60), seeded from test/ir (random
# seed ADJIT_FUZZ_SEED, 1 by default; runs on one machine explore alike, but
# not across machines: coverage feedback depends on addresses), with a
# dictionary of adjit's mnemonics and types. Fails when a target finds a crash
# (its input is left as BUILD_DIR/fuzz-<target>-crash-*).
# usage: fuzz/run.sh BUILD_DIR [SECONDS]
set -eu
# A finding prints its stack, and its input (base64) so a run elsewhere can be
# replayed: base64 -d > crash.adj; BUILD_DIR/fuzz_<target> crash.adj
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
build=$1; seconds=${2:-60}
src=$(cd "$(dirname "$0")/.." && pwd)
for target in parse compile; do
  corpus="$build/fuzz-corpus-$target"
  mkdir -p "$corpus"
  cp "$src"/test/ir/*.adj "$corpus"/
  echo "fuzz_$target: $seconds s"
  status=0
  "$build/fuzz_$target" -max_total_time="$seconds" -seed="${ADJIT_FUZZ_SEED:-1}" -dict="$build/adj.dict" -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-$target-" "$corpus" >"$build/fuzz-$target.log" 2>&1 || status=$?
  tail -n 8 "$build/fuzz-$target.log"
  if [ "$status" -ne 0 ]; then
    echo "FAILED: fuzz_$target found a crash (exit $status):"
    grep -E "ERROR|runtime error|Test unit written" "$build/fuzz-$target.log" | head -n 5
    grep -E "^ +#[0-9]+ " "$build/fuzz-$target.log" | head -n 30
    for crash in "$build"/fuzz-$target-crash-* "$build"/fuzz-$target-leak-* "$build"/fuzz-$target-timeout-*; do
      [ -f "$crash" ] || continue
      echo "input $crash (base64):"
      head -c 4096 "$crash" | base64
    done
    exit 1
  fi
done
echo "fuzzing ok"
