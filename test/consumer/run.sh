#!/bin/sh
# Installs the built adjit into a scratch prefix, then configures, builds and
# runs test/consumer against it, and runs the installed `adjit` command.
# usage: run.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1; src=$2
prefix="$build/consumer-install"; out="$build/consumer-build"
rm -rf "$prefix" "$out"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/test/consumer" -B "$out" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$out" >/dev/null
app=$("$out/app")
echo "$app"
[ "$app" = "consumer: 14" ] || { echo "FAILED: the consumer printed '$app'"; exit 1; }
# The installed command starts (it finds libadjit through its RUNPATH) and runs a function.
printf 'func @f(%%x: f32[]) -> (f32[]) {\n  %%y = add(%%x, %%x) : f32[]\n  return %%y\n}\n' >"$out/twice.adj"
got=$(env -u LD_LIBRARY_PATH ADJIT_CACHE_DIR= "$prefix/bin/adjit" run "$out/twice.adj" --fn f --arg 7:f32[] 2>&1) ||
  { echo "FAILED: the installed adjit: $got"; exit 1; }
echo "installed adjit: $got"
echo "consumer and installed adjit ok"
