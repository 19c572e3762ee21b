#!/bin/sh
# Runs a test with compiled code targeting an x86-64 micro-architecture level
# (ADJIT_CPU), so a developer with AVX-512 sees what SSE4.2 and AVX2 machines
# compute. Exits 77 (skipped) when the host cannot run that level's code.
# usage: run_for_cpu.sh x86-64-v2|x86-64-v3 COMMAND [ARGS...]
set -eu
cpu=$1; shift
case $cpu in
  x86-64-v2) need="sse4_2 popcnt" ;;
  x86-64-v3) need="avx2 fma bmi2" ;;
  *) echo "run_for_cpu.sh: unknown level $cpu"; exit 2 ;;
esac
for flag in $need; do
  grep -qw "$flag" /proc/cpuinfo || { echo "skipped: this host has no $flag for $cpu"; exit 77; }
done
# ADJIT_RANDOM_ORDER=1 (the x86-64-v2 run): doctest's cases in a random order,
# the seed printed to replay it, so no test leans on state another one left.
if [ "${ADJIT_RANDOM_ORDER:-}" = 1 ]; then
  seed=$(date +%s)
  echo "random order: ADJIT_CPU=$cpu $* --order-by=rand --rand-seed=$seed"
  set -- "$@" --order-by=rand --rand-seed="$seed"
fi
ADJIT_CPU=$cpu exec "$@"
