#!/bin/sh
# Compile-time diagnostics: each file here but ok.cpp must fail to compile
# with exactly one error, whose text is the file's "expect:" line, and the
# diagnostic must name the line marked "error-here" (the user's line, in the
# compiler's "required from here" note). ok.cpp must compile cleanly, so the
# test cannot pass merely because the compiler or include path is broken.
# usage: run.sh <c++ compiler> <include dir> <source dir>
set -u
cxx=$1 inc=$2 dir=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
for src in "$dir"/*.cpp; do
  name=$(basename "$src")
  out="$tmp/$name.txt"
  if "$cxx" -std=c++20 -fsyntax-only -I"$inc" "$src" >"$out" 2>&1; then ok=1; else ok=0; fi
  if [ "$name" = ok.cpp ]; then
    if [ $ok = 0 ]; then echo "FAIL $name: does not compile"; cat "$out"; fail=1; fi
    continue
  fi
  expect=$(sed -n 's|^// expect: ||p' "$src")
  line=$(grep -n 'error-here' "$src" | cut -d: -f1)
  errors=$(grep -c 'error:' "$out")
  if [ $ok = 1 ]; then echo "FAIL $name: compiled"; fail=1
  elif ! grep -qF "$expect" "$out"; then echo "FAIL $name: no '$expect' in:"; cat "$out"; fail=1
  elif [ "$errors" != 1 ]; then echo "FAIL $name: $errors errors, want 1:"; grep 'error:' "$out"; fail=1
  elif ! grep -q "$name:$line:" "$out"; then echo "FAIL $name: line $line not named:"; cat "$out"; fail=1
  else echo "ok   $name: $expect"; fi
done
[ $fail = 0 ] && echo "compile-time diagnostics ok"
exit $fail
