#!/usr/bin/env bash
# Packs what a GPU-machine run needs into .gpu-bin/ (git-ignored; copy it to the GPU machine with the tree):
# the CUDA build's binaries and the shared libraries that machine lacks (it has no utf8proc).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-cuda}
rm -rf .gpu-bin && mkdir -p .gpu-bin/lib
cp "$BUILD/kvdice" "$BUILD/test_backend" .gpu-bin/
# The commit the binaries were built from (the GPU machine's copy of the tree has no git history).
git describe --always --dirty --abbrev=12 > .gpu-bin/COMMIT
# The source tree the test binaries read their fixtures from (KVDICE_FIXTURES_DIR): gpu-env.sh links it.
sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" > .gpu-bin/SOURCE_DIR
[ -f "$BUILD/test_engine_soak" ] && cp "$BUILD/test_engine_soak" .gpu-bin/
[ -f "$BUILD/kvdice_gemv_chain_bench" ] && cp "$BUILD/kvdice_gemv_chain_bench" .gpu-bin/
[ -f "$BUILD/kvdice_gemm_sweep" ] && cp "$BUILD/kvdice_gemm_sweep" .gpu-bin/
# The kernel timeline's CUPTI injection library (tools/gpu/kernel_trace.cpp), with CUPTI beside it.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
g++ -O2 -shared -fPIC tools/gpu/kernel_trace.cpp -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib" -L"$CUDA_HOME/lib64" \
  -lcupti -o .gpu-bin/lib/libkernel_trace.so
cp -L "$(ldd .gpu-bin/lib/libkernel_trace.so | awk '/libcupti/ {print $3}')" .gpu-bin/lib/
# Every Debian library the binaries link, except the C/C++ runtime and what the GPU machine's image
# has (OpenBLAS with its Fortran runtime, libgomp; CUDA's own libraries).
for bin in .gpu-bin/kvdice .gpu-bin/test_backend; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libopenblas|libgfortran|libquadmath|libgomp|libcublas[^/]*|libcudart[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" .gpu-bin/lib/; done
ls .gpu-bin/lib
du -sh .gpu-bin
# XZ=1: also .gpu-carry/gpu-bin.tar.xz (~9 MB instead of ~32 MB), for runs that take the peers' pack
# (.gpu-peers/, ~41 MB) too: at most 64 MiB travel to the GPU machine. Unpack there with
# `mkdir -p .gpu-bin && tar xJf .gpu-carry/gpu-bin.tar.xz -C .gpu-bin`.
if [ "${XZ:-0}" = 1 ]; then
  mkdir -p .gpu-carry
  tar cf - -C .gpu-bin . | xz -T2 -6 > .gpu-carry/gpu-bin.tar.xz
  du -sh .gpu-carry/gpu-bin.tar.xz
fi
