#!/usr/bin/env bash
# The GPU planted-bug campaign, build half (here, no GPU needed): one stripped test_backend per patch of
# tools/gpu/planted/ (see campaign.tsv) plus the unpatched one. Each patch is applied to this tree,
# built in $BUILD (build-planted, a CUDA build of its own where a patch recompiles only its file and
# ccache serves the rest) and reverted at once, also when the script is stopped; a patched file with
# uncommitted changes is refused. The binaries, the libraries the GPU machine lacks and campaign.tsv go
# to .gpu-carry/planted.tar.xz (the binaries differ in one object, so one xz stream holds them in a few
# MB each); tools/gpu/run-planted.sh runs them there (carry [".gpu-carry"]). .planted/ (the binaries and
# logs) and .gpu-carry/ are git-ignored.
#   bash tools/gpu/planted-bugs.sh
#   PATCHES="random_pp-stream-heads-4-up compaction-first-tile-only" bash tools/gpu/planted-bugs.sh
# A patch that no longer applies or no longer compiles is reported by name and left out; the others
# are still built. ccache is used when installed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
WORK=$ROOT/.planted
BUILD=${BUILD:-build-planted}
JOBS=${JOBS:-2}
ALL=$(ls tools/gpu/planted/*.patch | xargs -n1 basename | sed 's/\.patch$//')
PATCHES=${PATCHES:-$ALL}
launchers=()
command -v ccache > /dev/null &&
  launchers=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
rm -rf "$WORK/bin" && mkdir -p "$WORK/bin" "$WORK/logs"
git describe --always --dirty --abbrev=12 > "$WORK/bin/COMMIT"
echo "$ROOT" > "$WORK/bin/SOURCE_DIR"  # the tree the binaries read fixtures from (gpu-env.sh links it)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVDICE_CUDA=ON "${launchers[@]}" \
  > "$WORK/logs/configure.log" 2>&1 || { echo "configure failed: $WORK/logs/configure.log"; exit 1; }
applied=""
revert() { [ -n "$applied" ] && patch -s -R -p1 < "$applied" && applied=""; }
trap 'revert' EXIT
trap 'revert; exit 130' INT TERM

build() {  # name
  if cmake --build "$BUILD" -j "$JOBS" --target test_backend > "$WORK/logs/build-$1.log" 2>&1; then
    strip -o "$WORK/bin/test_backend_$1" "$BUILD/test_backend"
    echo "built $1"
  else
    echo "BUILD FAILED $1 (log: $WORK/logs/build-$1.log)"
    return 1
  fi
}
build base || exit 1
failed=()
for name in $PATCHES; do
  patch_file=$ROOT/tools/gpu/planted/$name.patch
  files=$(grep -E '^\+\+\+ b/' "$patch_file" | sed 's|^+++ b/||')
  if ! git diff --quiet HEAD -- $files; then
    echo "REFUSED $name: $files has uncommitted changes"
    failed+=("$name")
    continue
  fi
  if ! patch -s -p1 --dry-run < "$patch_file" > "$WORK/logs/apply-$name.log" 2>&1; then
    echo "DOES NOT APPLY $name (log: $WORK/logs/apply-$name.log)"
    failed+=("$name")
    continue
  fi
  patch -s -p1 < "$patch_file" && applied=$patch_file
  build "$name" || failed+=("$name")
  revert
done

# The libraries the GPU machine lacks (tools/gpu/pack.sh's rule).
mkdir -p "$WORK/bin/lib"
ldd "$WORK/bin/test_backend_base" | awk '$3 ~ /^\// {print $3}' | sort -u \
  | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libopenblas|libgfortran|libquadmath|libgomp|libcublas[^/]*|libcudart[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$WORK/bin/lib/"; done
cp tools/gpu/planted/campaign.tsv "$WORK/bin/"
mkdir -p .gpu-carry
# One thread and a dictionary larger than a binary: each binary compresses against the previous one.
tar cf - -C "$WORK" bin | xz -T1 --lzma2=preset=6,dict=64MiB > .gpu-carry/planted.tar.xz
echo "$(ls "$WORK/bin" | grep -c '^test_backend_') binaries in .gpu-carry/planted.tar.xz ($(du -h .gpu-carry/planted.tar.xz | cut -f1))"
[ ${#failed[@]} -eq 0 ] || { echo "left out: ${failed[*]}"; exit 1; }
