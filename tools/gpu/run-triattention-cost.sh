#!/usr/bin/env bash
# TriAttention's cost on the GPU machine: TriAttention refuses to run without statistics of
# the same model, so this calibrates the random Qwen3-4B checkpoint first (kvdice calibrate runs on the
# machine's CPU; TOKENS of the project's own docs, enough for timing, not a real calibration), then
# times its eviction round (bench evict at BATCHES, default 1,16; 1,128 for the 5 % target at batch 128)
# and its fixed-load throughput beside random_pp. Results in
# $OUT/bench.{json,md,log}. Binaries come in .gpu-bin/ (tools/gpu/pack.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT" .gpu
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
M=.gpu/qwen3-4b
[ -f $M/config.json ] || timeout 120 python3 tools/gpu/make_checkpoint.py --shape configs/shapes/qwen3-4b.json --out $M | tail -1
STATS=.gpu/qwen3-4b-triattention.safetensors
cat docs/*.md README.md > .gpu/calibration.txt
timeout ${CALIBRATE_LIMIT:-240} .gpu-bin/kvdice calibrate --model $M --text .gpu/calibration.txt --tokens "${TOKENS:-2048}" \
  --segment 2048 --out $STATS 2>&1 | tee "$OUT/calibrate.txt" | tail -3
B() { timeout ${LIMIT:-120} .gpu-bin/kvdice bench "$@" --backend cuda --model $M --json-out "$OUT/bench.json" \
  --markdown-out "$OUT/bench.md" >> "$OUT/bench.log" 2>&1; echo "exit $? $*" | tee -a "$OUT/bench.log"; }
B evict --batches "${BATCHES:-1,16}" --budget 2048 --window 64 --prompt-len 1024 --policies triattention:stats=$STATS,random_pp
for policy in "triattention:stats=$STATS" random_pp; do
  B throughput --requests 128 --prompt-len 1024 --output-len "${OUTPUT:-1536}" --policy "$policy" --budget 2048 --window 64
done
[ -f "$OUT/bench.md" ] && cat "$OUT/bench.md"
