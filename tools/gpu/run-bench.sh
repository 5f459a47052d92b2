#!/usr/bin/env bash
# kvdice bench on the GPU machine, every protocol, into $OUT/bench.json (runs), $OUT/bench.md (a row
# per run) and $OUT/bench.log. The model is MODEL (a checkpoint directory) or random weights of SHAPE
# (default qwen3-4b). MODE=quick runs each protocol's --quick form (a check that the path works);
# MODE=full the figures of docs/benchmarks.md (OUTPUT: fixed-load outputs, MEMORY_GIB: capacity's KV
# pool, CAPACITY_OUTPUT). LIMIT caps each protocol's seconds; BACKEND (cuda) lets the CPU rehearse it.
# Binaries come prebuilt in .gpu-bin/ (tools/gpu/pack.sh), or BIN.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT"
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
BIN=${BIN:-.gpu-bin/kvdice}
MODE=${MODE:-quick}
if [ -n "${MODEL:-}" ]; then
  SOURCE=(--model "$MODEL")
else
  SOURCE=(--random-weights --config "configs/shapes/${SHAPE:-qwen3-4b}.json")
fi
bench() {
  echo "== kvdice bench $*" | tee -a "$OUT/bench.log"
  timeout "${LIMIT:-300}" "$BIN" bench "$@" --backend "${BACKEND:-cuda}" "${SOURCE[@]}" \
    --json-out "$OUT/bench.json" --markdown-out "$OUT/bench.md" >> "$OUT/bench.log" 2>&1
  echo "exit $?" | tee -a "$OUT/bench.log"
}
if [ "$MODE" = quick ]; then
  bench latency --quick
  bench throughput --quick
  bench throughput --quick --policy full
  bench evict --quick --policies random_pp,recency_pp,streaming
  # The quick capacity's pool: 20 GiB on the GPU; a rehearsal on the CPU (BACKEND=cpu) fits 1 GiB in its limit.
  bench capacity --quick --memory-gib "${QUICK_MEMORY_GIB:-$([ "${BACKEND:-cuda}" = cpu ] && echo 1 || echo 20)}"
else
  # Fixed load (docs/reference.md §4): 128 requests, 1k prompts, T=2048, r=64; steady state over
  # OUTPUT tokens.
  bench throughput --requests 128 --prompt-len 1024 --output-len "${OUTPUT:-2048}" --policy random_pp --budget 2048 --window 64
  # Full attention with 2k KV per sequence (llama.cpp's batch-128 point).
  bench throughput --requests 128 --prompt-len 1024 --output-len 1024 --policy full
  bench latency --short-context 128 --long-context 16384 --output-len 256
  bench evict --batches 1,128 --budget 2048 --window 64 --prompt-len 1024 --policies random_pp,random,random_shared,recency_pp,recency,streaming
  # The scoring policies' query ring costs ~4x the KV per page on CUDA (docs/policies.md): a smaller batch.
  bench evict --batches 1,16 --budget 2048 --window 64 --prompt-len 1024 --policies snapkv_pp,rkv_pp,vase_pp,snapkv
  # Equal memory, T=1024, 128-token inputs (the paper's isomem runs); 120 GiB of KV pool fits 796 sequences.
  bench capacity --memory-gib "${MEMORY_GIB:-120}" --budget 1024 --window 64 --prompt-len 128 --output-len "${CAPACITY_OUTPUT:-1024}"
fi
[ -f "$OUT/bench.md" ] && cat "$OUT/bench.md"
