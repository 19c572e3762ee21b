#!/bin/sh
# scripts/install-deps.sh with apt and dpkg replaced by stand-ins that install
# nothing: plain asks for the build's packages, --ci for those and CI's.
# usage: install_deps.sh SOURCE_DIR SCRATCH_DIR
set -eu
src=$1; dir=$2
rm -rf "$dir" && mkdir -p "$dir/bin"
# Nothing is installed; apt-get records what it was asked for; sudo runs its command.
printf '#!/bin/sh\nexit 1\n' >"$dir/bin/dpkg-query"
printf '#!/bin/sh\necho "$@" >>"%s/apt.log"\n' "$dir" >"$dir/bin/apt-get"
printf '#!/bin/sh\nexec "$@"\n' >"$dir/bin/sudo"
chmod +x "$dir/bin/"*
installs() { # the packages of the install command, one a line
  rm -f "$dir/apt.log"
  PATH="$dir/bin:$PATH" sh "$src/scripts/install-deps.sh" "$@" >/dev/null
  grep '^install ' "$dir/apt.log" | tr ' ' '\n' | grep -v '^-' | grep -v '^install$' | sort
}
installs >"$dir/plain"
installs --ci >"$dir/ci"
for p in cmake llvm-19-dev llvm-19-tools libfmt-dev doctest-dev; do
  grep -qx "$p" "$dir/plain" || { echo "plain: $p not installed"; cat "$dir/plain"; exit 1; }
done
# --ci adds to the list: everything the plain call installs, and clang.
comm -23 "$dir/plain" "$dir/ci" | grep . && { echo "--ci dropped the packages above"; exit 1; }
grep -qx clang-19 "$dir/ci" || { echo "--ci: clang-19 not installed"; cat "$dir/ci"; exit 1; }
grep -qx clang-19 "$dir/plain" && { echo "plain: clang-19 installed"; exit 1; }
echo "install-deps ok"
