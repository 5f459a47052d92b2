#!/usr/bin/env bash
# Installs a built tree into a temporary prefix, then builds examples/embed against it twice: with CMake
# (find_package(kvdice)) and with pkg-config alone; runs both on the tiny Qwen3 fixture under a budget.
#   scripts/test-install.sh BUILD_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/examples/embed" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" > /dev/null
cmake --build "$work/cmake-build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; echo "install test: examples/embed does not build against the installed tree"; exit 1; }
pc_dir=$(dirname "$(find "$work/prefix" -name kvdice.pc)")
# shellcheck disable=SC2046  # pkg-config prints several flags
g++ -std=c++20 -O1 -o "$work/embed-pc" "$src/examples/embed/embed.cpp" \
    $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs kvdice) ||
  { echo "install test: examples/embed does not build with pkg-config's flags"; exit 1; }
model="$src/tests/fixtures/qwen3"
for exe in "$work/cmake-build/embed" "$work/embed-pc"; do
  out=$("$exe" "$model" "The capital of France is" 40 random_pp 32 16)
  echo "$out"
  grep -q '^finish: length, prompt [0-9]*, generated 40, eviction rounds 1,' <<< "$out"
done
# A bad model path is an error naming it, exit 1.
if "$work/embed-pc" "$work/no-such-model" "x" 4 2> "$work/err"; then echo "bad model accepted"; exit 1; fi
grep -q 'no-such-model' "$work/err"
echo "install test: passed"
