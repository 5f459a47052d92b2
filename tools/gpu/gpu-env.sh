# Sourced by the GPU machine's scripts: the loader path for kvdice's binaries there. LIB_DIR holds the
# libraries that machine lacks (.gpu-bin/lib from pack.sh, or .gpu-var/lib from pack-ab.sh); cuBLASLt 13
# is found wherever the image installed it.
gpu_library_path() {
  local lib_dir=$1 cublas_dir
  cublas_dir=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH="$PWD/$lib_dir:$cublas_dir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
}
