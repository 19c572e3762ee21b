#!/bin/sh
# Installs the built adjit into a scratch prefix, then configures, builds and
# runs test/consumer against it.  usage: run.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1; src=$2
prefix="$build/consumer-install"; out="$build/consumer-build"
rm -rf "$prefix" "$out"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/test/consumer" -B "$out" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$out" >/dev/null
"$out/app"
