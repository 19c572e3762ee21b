#!/bin/sh
# ADJIT_DUMP writes every stage of a compilation; ADJIT_LOG=compile logs one line
# per compilation, ADJIT_LOG=passes one per pass.
# usage: dump_and_log.sh QUICKSTART ADJIT_CLI SCRATCH_DIR AUTODIFF_EXAMPLE
set -eu
quickstart=$1; cli=$2; dir=$3; autodiff=$4
rm -rf "$dir"
ADJIT_DUMP="$dir" ADJIT_LOG=compile "$quickstart" >/dev/null 2>"$dir.log"
grep -E '^\[adjit:compile\] f\(f32\[4\], f32\[\]\) -> \(f32\[\]\): trace [0-9.]+ ms, key [0-9.]+ ms, passes [0-9.]+ ms, llvm [0-9.]+ ms \(plan [0-9.]+, lower [0-9.]+, optimise [0-9.]+, codegen [0-9.]+\), link [0-9.]+ ms, cache miss, dump f\.1\.[0-9a-f]{8}$' "$dir.log"
# Files are <fn>.<number of the compilation>.<hash of the signature>.<stage>,
# each opening with a comment naming the function, its signature and its kernel.
for stage in 1-traced.adj:// 2-optimized.adj:// 3-plan.txt:// 4-llvm.ll:\; 5-llvm-opt.ll:\; 6-asm.s:\#; do
  f=$(ls "$dir"/f.1.*."${stage%%:*}")
  test -s "$f" || { echo "missing or empty: $stage"; exit 1; }
  head -1 "$f" | grep -qE "^${stage#*:} adjit dump f\.1\.[0-9a-f]{8}: f\(f32\[4\], f32\[\]\) -> \(f32\[\]\), kernel adjit_[0-9a-f]{16}_f$" ||
    { echo "no header line in $f:"; head -1 "$f"; exit 1; }
done
grep -q '^plan @f: ' "$dir"/f.*.3-plan.txt
# The dumped IR, locations included, parses back.
"$cli" opt "$dir"/f.*.1-traced.adj --passes= >/dev/null
grep -q 'loc("' "$dir"/f.*.1-traced.adj
grep -q '_ZGV' "$dir"/f.*.6-asm.s || grep -q 'log1pf' "$dir"/f.*.6-asm.s
# Kernels of one name and signature (autodiff's three grad(f64[]) -> (f64[]))
# each have their own files, named in their log lines.
ADJIT_DUMP="$dir/grads" ADJIT_LOG=compile "$autodiff" >/dev/null 2>"$dir.grads"
kernels=$(grep -c '^\[adjit:compile\] grad(f64\[\]) -> (f64\[\]): .*, dump grad\.[0-9]*\.[0-9a-f]*$' "$dir.grads")
[ "$kernels" -ge 2 ] || { echo "expected several grad(f64[]) compilations, got $kernels"; cat "$dir.grads"; exit 1; }
dumped=$(grep -l '^// adjit dump grad\.[0-9]*\.[0-9a-f]*: grad(f64\[\]) -> (f64\[\]), kernel' "$dir"/grads/grad.*.1-traced.adj | wc -l)
[ "$dumped" = "$kernels" ] || { echo "$kernels grad(f64[]) compilations left $dumped dumps"; ls "$dir/grads"; exit 1; }
for name in $(sed -n 's/^\[adjit:compile\] .*, dump \(.*\)$/\1/p' "$dir.grads"); do
  test -s "$dir/grads/$name.6-asm.s" || { echo "the log names $name, which has no dump"; exit 1; }
done
# ADJIT_LOG=passes: each line names the function and signature compiled (with
# no disk cache, whose hits run no passes).
ADJIT_CACHE_DIR= ADJIT_LOG=passes "$quickstart" >/dev/null 2>"$dir.passes"
all=$(grep -c '^\[adjit:passes\] ' "$dir.passes")
named=$(grep -cE '^\[adjit:passes\] f\(f32\[4\], f32\[\]\) -> \(f32\[\]\): [a-z-]+: [0-9.]+ ms$' "$dir.passes")
[ "$all" -gt 0 ] && [ "$all" = "$named" ] || { echo "passes lines without their function"; cat "$dir.passes"; exit 1; }
# An unknown ADJIT_LOG value is one warning per process; the known ones still log.
ADJIT_LOG=pases "$quickstart" >/dev/null 2>"$dir.unknown"
[ "$(cat "$dir.unknown")" = "adjit: warning: ADJIT_LOG: unknown value 'pases' ignored (known: compile, passes, all)" ] ||
  { echo "expected one warning for ADJIT_LOG=pases"; cat "$dir.unknown"; exit 1; }
grep -qFf "$dir.unknown" "$(dirname "$0")/../../docs/guide/errors.md" || { echo "docs/guide/errors.md does not show the ADJIT_LOG warning"; exit 1; }
ADJIT_LOG=compile,bogus,nope "$autodiff" >/dev/null 2>"$dir.unknown"
[ "$(grep -c 'adjit: warning: ADJIT_LOG' "$dir.unknown")" = 1 ] &&
  grep -q "^adjit: warning: ADJIT_LOG: unknown values 'bogus', 'nope' ignored (known: compile, passes, all)$" "$dir.unknown" &&
  grep -q '^\[adjit:compile\] ' "$dir.unknown" || { echo "expected one warning for bogus and nope, and compile lines"; cat "$dir.unknown"; exit 1; }
ADJIT_LOG=compile,passes,all "$quickstart" >/dev/null 2>"$dir.unknown"
! grep -q warning "$dir.unknown" || { echo "warning for known ADJIT_LOG values"; cat "$dir.unknown"; exit 1; }
# A dump directory that cannot be made: one warning line, and the program still runs.
ADJIT_DUMP=/proc/adjit-no-such-dir "$quickstart" >/dev/null 2>"$dir.warn"
[ "$(grep -c 'adjit: warning: ADJIT_DUMP: cannot write files in' "$dir.warn")" = 1 ] || { echo "expected one ADJIT_DUMP warning"; cat "$dir.warn"; exit 1; }
# ADJIT_LLVM_ARGS: a valid LLVM option is taken silently; a bad one is a warning, and the program still runs.
ADJIT_LLVM_ARGS="-enable-post-misched=false" "$quickstart" >/dev/null 2>"$dir.llvm"
[ ! -s "$dir.llvm" ] || { echo "unexpected output for a valid ADJIT_LLVM_ARGS"; cat "$dir.llvm"; exit 1; }
ADJIT_LLVM_ARGS="-no-such-llvm-option" "$quickstart" >/dev/null 2>"$dir.llvm"
grep -q "adjit: warning: ADJIT_LLVM_ARGS ignored: .*no-such-llvm-option" "$dir.llvm" || { echo "no ADJIT_LLVM_ARGS warning"; cat "$dir.llvm"; exit 1; }
echo "dump and log ok"
