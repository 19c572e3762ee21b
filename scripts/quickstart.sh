#!/bin/sh
# The first README command: install what is missing, build, run the quickstart.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target quickstart
./build/quickstart
