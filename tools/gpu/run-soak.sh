#!/usr/bin/env bash
# The engine soak on the GPU machine (tests/backend/engine_soak.h): the server's admission pattern at
# the Qwen3-4B shape with random weights (36 layers, 8 KV heads, batch up to 128), then the same
# pattern on 2 layers with the same heads under compute-sanitizer memcheck. Binaries come prebuilt in
# .gpu-bin/ (tools/gpu/pack.sh, which takes test_engine_soak when the CUDA build has it); results go
# to $OUT. The summary's "soak:" lines are what docs/server.md records.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}
mkdir -p "$OUT"
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
BIN=.gpu-bin
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$OUT/commit.txt"
status=0

log "engine soak, Qwen3-4B shape"
timeout ${SOAK_TIMEOUT:-1500} $BIN/test_engine_soak --gtest_also_run_disabled_tests \
  --gtest_filter='CudaEngineSoak.DISABLED_Qwen3_4BShape' 2>&1 | tee "$OUT/soak.txt" \
  | grep -E "^soak:|OK \]|FAILED|Failure|request [0-9]+|rror" | head -40 | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

if [ "${MEMCHECK:-1}" = 1 ]; then
  log "engine soak under compute-sanitizer memcheck, 2 layers with the Qwen3-4B heads"
  timeout ${MEMCHECK_TIMEOUT:-1500} compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
    $BIN/test_engine_soak --gtest_also_run_disabled_tests \
    --gtest_filter='CudaEngineSoak.DISABLED_Qwen3_4BHeadsTwoLayers' 2>&1 | tee "$OUT/soak-memcheck.txt" \
    | grep -E "^soak:|ERROR SUMMARY|OK \]|FAILED|Failure|Invalid|rror" | head -40 | tee -a "$OUT/summary.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
log "exit $status"
exit $status
