#!/usr/bin/env bash
# Adds one build to the A/B carry of the GPU machine: strips BUILD/kvdice (and BUILD/test_backend with
# TESTS=1) into .gpu-var/ as kvdice_NAME (test_backend_NAME), with the shared libraries that machine lacks
# (.gpu-bin/lib from tools/gpu/pack.sh, packed once), then rewrites .gpu-carry/var.tar.xz (about 5 MB a
# build). Carry [".gpu-carry"] and run tools/gpu/ab-latency.sh there.
#   tools/gpu/pack-ab.sh main build-cuda      # before the change
#   TESTS=1 tools/gpu/pack-ab.sh new build-cuda
# RESET=1 empties .gpu-var first. Never `strip -o -`: it writes a file named "-".
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=${1:?usage: pack-ab.sh NAME [BUILD_DIR]}
BUILD=${2:-build-cuda}
[ "${RESET:-0}" = 1 ] && rm -rf .gpu-var
mkdir -p .gpu-var .gpu-carry
if [ ! -d .gpu-var/lib ]; then
  [ -d .gpu-bin/lib ] || tools/gpu/pack.sh "$BUILD" > /dev/null
  cp -r .gpu-bin/lib .gpu-var/lib
fi
strip -o ".gpu-var/kvdice_$NAME" "$BUILD/kvdice"
[ "${TESTS:-0}" = 1 ] && strip -o ".gpu-var/test_backend_$NAME" "$BUILD/test_backend"
tar cf - .gpu-var | xz -T2 -6 > .gpu-carry/var.tar.xz
ls .gpu-var
du -sh .gpu-carry/var.tar.xz
