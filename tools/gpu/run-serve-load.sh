#!/usr/bin/env bash
# Serving load on the GPU machine, on the random-weight Qwen3-4B checkpoint (tools/gpu/make_checkpoint.py),
# in one go: the offline fixed load (`bench throughput`: 128 requests of 1k prompts, random_pp T=2048
# r=64) and `bench serve` (kvdice serve in process, streaming clients) at the same load all at once and
# with Poisson arrivals, at 32 requests in flight, and the max-throughput point (1000 requests of 1k in /
# 1k out at once, the server's defaults). Every run goes to $OUT/serve-load.json ({"runs": [...]}),
# a row each to $OUT/serve-load.md, the output to $OUT/serve-load.log.
#   OUTPUT (2048): output tokens of the fixed-load legs; RATE (16): the Poisson leg's requests/s;
#   LIMIT (280): seconds each leg may take; BACKEND (cuda) lets the CPU rehearse it (with a small
#   MODEL, e.g. tests/fixtures/qwen3, and small OUTPUT/N_MAX).
#   LLAMA_SERVER, GGUF: a llama.cpp llama-server binary and the checkpoint as GGUF; when both exist,
#   the same serve legs run against it with --url (side by side, same client).
#   LEGS ("throughput all poisson c32 max scoring llama"): which legs run, e.g. LEGS="all c32 llama" for
#   the side by side alone; SCORING ("snapkv_pp:precision=fp32 h2o_pp"): the scoring leg's policies.
# Binaries come prebuilt in .gpu-bin/ (tools/gpu/pack.sh), or BIN.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT"
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
BIN=${BIN:-.gpu-bin/kvdice}
BACKEND=${BACKEND:-cuda}
OUTPUT=${OUTPUT:-2048}
RATE=${RATE:-16}
N_MAX=${N_MAX:-1000}
LEGS=" ${LEGS:-throughput all poisson c32 max scoring llama} "
LOG="$OUT/serve-load.log"
want() { [[ "$LEGS" == *" $1 "* ]]; }
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$OUT/commit.txt"
M=${MODEL:-.gpu/qwen3-4b}
if [ ! -f "$M/config.json" ]; then
  echo "== making the random-weight checkpoint $M" | tee -a "$LOG"
  timeout 300 python3 tools/gpu/make_checkpoint.py --shape configs/shapes/qwen3-4b.json --out "$M" >> "$LOG" 2>&1 \
    || { echo "make_checkpoint.py failed (see $LOG)"; exit 1; }
fi

leg() {
  echo "== kvdice bench $*" | tee -a "$LOG"
  # A serve leg stops its own load 40 s before the limit, so a slow one still records what finished.
  local stop=()
  [ "$1" = serve ] && stop=(--max-duration "$(( ${LIMIT:-280} - 40 ))")
  timeout "${LIMIT:-280}" "$BIN" bench "$@" "${stop[@]}" --json-out "$OUT/serve-load.json" \
    --markdown-out "$OUT/serve-load.md" >> "$LOG" 2>&1
  local rc=$?
  echo "exit $rc" | tee -a "$LOG"
  [ $rc = 0 ] || status=1
}
FIXED=(--input-len 1024 --output-len "$OUTPUT" --policy random_pp --budget 2048 --window 64)

# 1. The offline fixed load: the engine alone, one batch of 128.
want throughput && leg throughput --model "$M" --backend "$BACKEND" --requests 128 --prompt-len 1024 --output-len "$OUTPUT" \
  --policy random_pp --budget 2048 --window 64
# 2. The same load through the server: all 128 at once, then Poisson arrivals capped at 128 in flight.
want all && leg serve --model "$M" --backend "$BACKEND" "${FIXED[@]}" --num-requests 128 --request-rate inf
want poisson && leg serve --model "$M" --backend "$BACKEND" "${FIXED[@]}" --num-requests 256 --request-rate "$RATE" \
  --max-concurrency 128
# 3. 32 requests in flight.
want c32 && leg serve --model "$M" --backend "$BACKEND" "${FIXED[@]}" --num-requests 128 --max-concurrency 32
# 4. Max throughput: 1000 requests of 1k in / 1k out at once, the server's defaults.
want max && leg serve --model "$M" --backend "$BACKEND" --num-requests "$N_MAX" --input-len 1024 --output-len 1024
# 5. The Poisson leg with scoring policies (SCORING), whose signals the server records while requests
#    arrive and others decode.
for policy in ${SCORING:-snapkv_pp:precision=fp32 h2o_pp}; do
  want scoring && leg serve --model "$M" --backend "$BACKEND" --input-len 1024 --output-len "$OUTPUT" \
    --policy "$policy" --budget 2048 --window 64 --num-requests 256 --request-rate "$RATE" --max-concurrency 128
done

# 6. llama.cpp's llama-server on the same checkpoint (GGUF), the same client, when present.
if ! want llama; then
  :
elif [ -n "${LLAMA_SERVER:-}" ] && [ -x "${LLAMA_SERVER}" ] && [ -f "${GGUF:-}" ]; then
  PORT=${LLAMA_PORT:-8091}
  "$LLAMA_SERVER" -m "$GGUF" --host 127.0.0.1 --port "$PORT" -ngl 999 -np 128 -c $((128 * (1024 + OUTPUT))) \
    -cb > "$OUT/llama-server.log" 2>&1 &
  LS=$!
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 1; done
  URL=(--url "http://127.0.0.1:$PORT" --served-model llama-server)
  want all && leg serve "${URL[@]}" --input-len 1024 --output-len "$OUTPUT" --num-requests 128 --request-rate inf
  want poisson && leg serve "${URL[@]}" --input-len 1024 --output-len "$OUTPUT" --num-requests 256 \
    --request-rate "$RATE" --max-concurrency 128
  want c32 && leg serve "${URL[@]}" --input-len 1024 --output-len "$OUTPUT" --num-requests 128 --max-concurrency 32
  kill "$LS"; wait "$LS" 2>/dev/null
else
  echo "== llama-server leg skipped (set LLAMA_SERVER=path/to/llama-server and GGUF=model.gguf)" | tee -a "$LOG"
fi
[ -f "$OUT/serve-load.md" ] && cat "$OUT/serve-load.md"
echo "exit $status"
exit $status
