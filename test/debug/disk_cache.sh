#!/bin/sh
# The persistent kernel cache across processes: a miss then a hit that runs no
# LLVM, corrupt and truncated entries ignored and rewritten, an unusable
# directory falling back to memory with one warning, racing processes.
# usage: disk_cache.sh QUICKSTART SCRATCH_DIR
set -eu
quickstart=$1; dir=$2
rm -rf "$dir"; mkdir -p "$dir"
cache=$dir/cache
run() { ADJIT_CACHE_DIR=$1 ADJIT_LOG=compile "$quickstart" >"$dir/out" 2>"$dir/log"; cat "$dir/log"; }
fail() { echo "FAILED: $*"; cat "$dir/log"; exit 1; }
"$quickstart" >"$dir/want" 2>/dev/null

run "$cache" | grep -q 'cache miss, disk miss$' || fail "first run: expected a disk miss"
# Tiered: the first call ran tier 1; the optimised tier went to disk (at exit at the latest).
grep -q 'tier 1' "$dir/log" || fail "first run: expected tier 1 code on the first call"
grep -q 'tier 2 (optimised).*stored to disk' "$dir/log" || fail "first run: the optimised tier was not stored"
cmp -s "$dir/out" "$dir/want" || fail "first run: wrong output"
[ "$(stat -c %a "$cache")" = 700 ] || fail "cache directory is not 0700"
entry=$(ls "$cache"/*.adjk); [ "$(ls "$cache" | wc -l)" = 1 ] || fail "expected one entry"
size=$(stat -c %s "$entry")

run "$cache" | grep -q 'disk hit$' || fail "second run: expected a disk hit"
grep -q 'llvm' "$dir/log" && fail "a disk hit ran LLVM"
grep -q 'tier' "$dir/log" && fail "a disk hit should start with optimised code"
cmp -s "$dir/out" "$dir/want" || fail "disk hit: wrong output"

# Truncated, then one byte flipped: ignored, recompiled, rewritten whole.
head -c 100 "$entry" >"$entry.t" && mv "$entry.t" "$entry"
run "$cache" | grep -q 'disk cache: ignoring truncated' || fail "truncated entry not reported"
grep -q 'disk miss$' "$dir/log" || fail "truncated entry: expected a recompile"
cmp -s "$dir/out" "$dir/want" || fail "truncated entry: wrong output"
[ "$(stat -c %s "$entry")" = "$size" ] || fail "truncated entry not rewritten"
printf 'X' | dd of="$entry" bs=1 seek=200 conv=notrunc 2>/dev/null
run "$cache" | grep -q 'disk cache: ignoring corrupt' || fail "corrupt entry not reported"
cmp -s "$dir/out" "$dir/want" || fail "corrupt entry: wrong output"
run "$cache" | grep -q 'disk hit$' || fail "rewritten entry: expected a disk hit"

# A directory that cannot be created: one warning line, results still right.
touch "$dir/file"
run "$dir/file/cache" >/dev/null
[ "$(grep -c 'adjit: warning: kernel cache directory' "$dir/log")" = 1 ] || fail "expected one warning line"
cmp -s "$dir/out" "$dir/want" || fail "unusable directory: wrong output"

# An empty ADJIT_CACHE_DIR disables the disk cache.
run "" | grep -q 'disk' && fail "ADJIT_CACHE_DIR= should disable the disk cache"

# Four processes racing on one key: all right, one entry, no temporary files.
race=$dir/race
for i in 1 2 3 4; do ADJIT_CACHE_DIR=$race "$quickstart" >"$dir/race.$i" 2>&1 & done
wait
for i in 1 2 3 4; do cmp -s "$dir/race.$i" "$dir/want" || fail "racing process $i: wrong output"; done
[ "$(ls "$race" | wc -l)" = 1 ] || { ls -la "$race"; fail "racing processes left $(ls "$race" | wc -l) files"; }
echo "disk cache ok"
