#!/usr/bin/env bash
# Packs what a GPU-machine call needs into .gpu-bin/ (ignored; pass it in the device tool's `carry`):
# the CUDA build's binaries and the shared libraries that machine lacks (it has no utf8proc).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-cuda}
rm -rf .gpu-bin && mkdir -p .gpu-bin/lib
cp "$BUILD/kvdice" "$BUILD/test_backend" .gpu-bin/
for lib in libutf8proc.so.2 libfmt.so.9 libpcre2-8.so.0 libcrypto.so.3; do
  cp -L "/lib/x86_64-linux-gnu/$lib" .gpu-bin/lib/
done
du -sh .gpu-bin
