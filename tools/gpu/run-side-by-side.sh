#!/usr/bin/env bash
# kvdice and its peers on the same random-weight Qwen3-4B checkpoint in one run on the GPU machine:
# the CUDA tests that changed, the checkpoint (tools/gpu/make_checkpoint.py), every `kvdice bench`
# protocol on it, then the peers (tools/peers/run-peers.sh: llama.cpp and the paper's HF harness) with
# the time left. Binaries come in .gpu-bin/ (tools/gpu/pack.sh), the peers in .gpu-peers/
# (tools/peers/build_llama_cpp.sh). Everything lands in $OUT/side-by-side.tgz plus summary.md.
#   BUDGET_S (520): the whole run's seconds; TESTS (gtest filter); OUTPUT, MEMORY_GIB, LIMIT: passed
#   on to run-bench.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT"
WORK=$(mktemp -d); T0=$(date +%s)
left() { echo $(( ${BUDGET_S:-520} - ($(date +%s) - T0) )); }
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
summary() { echo "$*" | tee -a "$WORK/summary.md"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$WORK/gpu.txt"

summary "## tests"
timeout 100 .gpu-bin/test_backend --gtest_filter="${TESTS:-CudaOps.Attention:CudaEngine.*:CudaEvict*:Policies/CudaScoringPolicy.*:CudaTriAttention.*:CudaSignals.*}" \
  > "$WORK/tests.txt" 2>&1
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED  \]|Failure" "$WORK/tests.txt" | head -20 | tee -a "$WORK/summary.md"

M=.gpu/qwen3-4b
[ -f $M/config.json ] || timeout 120 python3 tools/gpu/make_checkpoint.py --shape configs/shapes/qwen3-4b.json --out $M \
  > "$WORK/checkpoint.txt" 2>&1
# Every bench protocol on the checkpoint (tools/gpu/run-bench.sh, MODE=full), each capped at LIMIT.
OUT="$WORK" MODE=full MODEL=$M LIMIT=${LIMIT:-100} bash tools/gpu/run-bench.sh > /dev/null
grep -E "^(==|exit)" "$WORK/bench.log" >> "$WORK/summary.md"
[ -f "$WORK/bench.md" ] && cat "$WORK/bench.md" >> "$WORK/summary.md"

# The peers: llama.cpp and the HF harness from the pack, or the HF harness alone from tools/peers/
# when no pack was carried (it needs only the GPU machine's torch and transformers).
PEERS=tools/peers/run-peers.sh; [ -d .gpu-peers ] && PEERS=.gpu-peers/run-peers.sh
if (( $(left) > 60 )); then
  summary "## peers ($(left) s left)"
  BUDGET_S=$(( $(left) - 15 )) bash $PEERS $M "$WORK/peers" > "$WORK/peers.log" 2>&1
  cat "$WORK/peers/summary.md" >> "$WORK/summary.md" 2>/dev/null
fi
cp "$WORK/summary.md" "$OUT/summary.md"
tar czf "$OUT/side-by-side.tgz" -C "$WORK" --exclude='*.gguf' --exclude='*.safetensors' .
cat "$OUT/summary.md"
