# Sourced by the GPU machine's scripts: the loader path for kvdice's binaries there. LIB_DIR holds the
# libraries that machine lacks (.gpu-bin/lib from pack.sh, or .gpu-var/lib from pack-ab.sh); cuBLASLt 13
# is found wherever the image installed it.
gpu_library_path() {
  local lib_dir=$1 cublas_dir
  cublas_dir=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH="$PWD/$lib_dir:$cublas_dir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
}

# A test binary reads its fixtures and configs at the source path it was built in (KVDICE_FIXTURES_DIR,
# KVDICE_SOURCE_DIR). When this tree lies elsewhere, that path becomes a link to it (run from the
# repository root). The path is SOURCE_DIR beside the binary (pack.sh, planted-bugs.sh write it);
# without it, the path is read from the binary, which can run into a neighbouring string. Prints what
# it did.
link_source_path() {
  local bin=$1 baked baked_root
  if [ -f "$(dirname "$bin")/SOURCE_DIR" ]; then
    baked_root=$(cat "$(dirname "$bin")/SOURCE_DIR")
  else
    baked=$(grep -aoE '/[[:alnum:]_.+/-]+/tests/fixtures' "$bin" | head -1)
    baked_root=${baked%/tests/fixtures}
  fi
  [ -n "$baked_root" ] || return 0
  [ "$(realpath -m "$baked_root")" = "$(realpath "$PWD")" ] && return 0
  if [ -e "$baked_root" ] && [ ! -L "$baked_root" ]; then
    echo "warning: $bin reads $baked_root, another tree than $PWD: its fixtures are used"
  elif mkdir -p "$(dirname "$baked_root")" 2>/dev/null && ln -sfn "$PWD" "$baked_root" 2>/dev/null; then
    echo "linked $baked_root -> $PWD (the source path of $bin)"
  else
    echo "warning: cannot link $baked_root to $PWD: tests that read fixtures will fail"
  fi
}
