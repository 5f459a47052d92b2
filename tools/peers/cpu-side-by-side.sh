#!/usr/bin/env bash
# The CPU table of docs/benchmarks.md: kvdice's CPU backend beside llama.cpp's llama-bench on the same
# GGUF with the same thread counts, alternating run by run so that both see the same machine load.
# Prints one CSV row per run: round, engine, threads, prefill tok/s (128-token prompt), decode tok/s
# (64 tokens after it), model load seconds (kvdice only), and the 1-minute load average as the run
# ended (the machine may be shared: the two engines' numbers are comparable row by row, not absolute).
#
#   tools/peers/cpu-side-by-side.sh                      # ROUNDS=3 THREADS="1 2"
#   KVDICE_ARGS="--cpu-math exact" tools/peers/cpu-side-by-side.sh
#   KVDICE_BASELINE=/path/to/older/kvdice tools/peers/cpu-side-by-side.sh   # also an older build, same rounds
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KVDICE="${KVDICE:-$ROOT/build/kvdice}"
LLAMA_BENCH="${LLAMA_BENCH:-$ROOT/.peers-build/build-cpu/bin/llama-bench}"
MODEL="${MODEL:-$("$KVDICE" pull default 2>/dev/null | tail -1)}"
ROUNDS="${ROUNDS:-3}"
THREADS="${THREADS:-1 2}"
PROMPT="${PROMPT:-128}"
OUTPUT="${OUTPUT:-64}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One kvdice run: engine label, binary, threads, round.
run_kvdice() {
  local label=$1 bin=$2 t=$3 round=$4
  # shellcheck disable=SC2086
  "$bin" bench latency --backend cpu --model "$MODEL" --threads "$t" ${KVDICE_ARGS:-} \
    --short-context "$PROMPT" --long-context $((2 * PROMPT)) --output-len "$OUTPUT" \
    --json-out "$tmp/kvdice.json" > /dev/null 2>&1
  python3 - "$tmp/kvdice.json" "$round" "$t" "$PROMPT" "$label" <<'PY'
import json, sys
path, round_, threads, prompt, label = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
loadavg = open("/proc/loadavg").read().split()[0]
run = json.load(open(path))["runs"][-1]
def find(x):
    if isinstance(x, dict):
        if "output_tok_s_decode" in x and x.get("context") == prompt: yield x
        for v in x.values(): yield from find(v)
    elif isinstance(x, list):
        for v in x: yield from find(v)
r = next(find(run))
print(f"{round_},{label},{threads},{prompt / r['prefill_seconds']:.1f},{r['output_tok_s_decode']:.1f},"
      f"{run.get('model_load_seconds', float('nan')):.2f},{loadavg}")
PY
}

echo "round,engine,threads,prefill_tok_s,decode_tok_s,load_s,loadavg"
for round in $(seq 1 "$ROUNDS"); do
  for t in $THREADS; do
    run_kvdice kvdice "$KVDICE" "$t" "$round"
    if [[ -n "${KVDICE_BASELINE:-}" ]]; then run_kvdice kvdice-baseline "$KVDICE_BASELINE" "$t" "$round"; fi
    if [[ -x "$LLAMA_BENCH" ]]; then
      "$LLAMA_BENCH" -m "$MODEL" -t "$t" -p "$PROMPT" -n "$OUTPUT" -r 1 -o csv 2>/dev/null |
        python3 -c "
import csv, sys
rows = list(csv.DictReader(sys.stdin))
pp = next(float(r['avg_ts']) for r in rows if int(r['n_prompt']) > 0)
tg = next(float(r['avg_ts']) for r in rows if int(r['n_gen']) > 0)
load = open('/proc/loadavg').read().split()[0]
print(f'$round,llama.cpp,$t,{pp:.1f},{tg:.1f},,{load}')"
    fi
  done
done
