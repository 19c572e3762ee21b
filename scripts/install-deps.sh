#!/bin/sh
# Installs what a fresh Debian 12 machine lacks to build and test adjit.
# Runs apt only when a package is missing; needs root (or sudo) for that.
set -eu
packages="cmake ninja-build g++ python3 llvm-19-dev llvm-19-tools libfmt-dev doctest-dev libopenblas-dev libeigen3-dev nlohmann-json3-dev"
# Optional: IPOPT and Ceres for examples/ipopt_control and examples/ceres_ba
# (each example is skipped without its solver; see the README).
packages="$packages pkg-config coinor-libipopt-dev libceres-dev"
# --ci: also what CI's sanitizer and fuzzing stages need (clang-19 and its libFuzzer runtime).
[ "${1:-}" = "--ci" ] && packages="$packages clang-19 libclang-rt-19-dev"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "adjit: installing:$missing"
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
