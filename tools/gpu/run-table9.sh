#!/usr/bin/env bash
# The paper's Table 9 protocol as docs/benchmarks.md reports it: `kvdice bench evict --preset table9` over
# every scoring policy at the preset's scoring settings, batches 1 and 128, on random weights of the
# Qwen3-4B shape (TriAttention's statistics first calibrated on the same random model, on the CPU).
# BINS ("a b ..."): kvdice binaries to compare, run in turn REPS times (default: .gpu-bin/kvdice once), so
# that each figure has its baseline from the same machine and the same minutes.
# Results: $OUT/table9_<i>_<rep>.md and .json (i: the binary's place in BINS), the log beside them, and
# one line a policy and batch on stdout.
#   POLICIES: the specs (default: the table's seven); BATCHES ("1 128"); REPEATS (3); SHAPE (qwen3-4b);
#   LIMIT: seconds a bench may take (300); BACKEND (cuda); MAX_CONTEXT: page tables as wide as the engine
#   builds them for this context (40960: kvdice serve's for Qwen3-4B; unset: T + r).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT"
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
read -r -a BIN_LIST <<< "${BINS:-.gpu-bin/kvdice}"
SHAPE=configs/shapes/${SHAPE:-qwen3-4b}.json
read -r -a BATCH_LIST <<< "${BATCHES:-1 128}"
STATS=$OUT/table9-rw.tri
if [ -n "${POLICIES:-}" ]; then
  read -r -a POLICY_LIST <<< "$POLICIES"
else
  POLICY_LIST=(random_pp "snapkv_pp:pool=5,temperature=0.6,precision=fp32"
               "rkv_pp:lambda=0.1,pool=5,temperature=0.6,precision=fp32"
               "vase_pp:large=0.25,pool=5,temperature=0.6,precision=fp32" h2o_pp rkv_official
               "triattention:stats=$STATS")
fi
if [[ " ${POLICY_LIST[*]} " == *"stats=$STATS"* && ! -f "$STATS" ]]; then
  "${BIN_LIST[0]}" calibrate --random-weights --config "$SHAPE" --tokens 256 --segment 256 --out "$STATS" \
    > "$OUT/table9-calibrate.log" 2>&1 || { echo "calibrate failed (see $OUT/table9-calibrate.log)"; exit 1; }
fi
status=0
for rep in $(seq 1 "${REPS:-1}"); do
  for i in "${!BIN_LIST[@]}"; do
    run=$OUT/table9_${i}_$rep
    timeout "${LIMIT:-300}" "${BIN_LIST[$i]}" bench evict --random-weights --config "$SHAPE" \
      --backend "${BACKEND:-cuda}" --preset table9 --batches "${BATCH_LIST[@]}" --repeats "${REPEATS:-3}" \
      --policies "${POLICY_LIST[@]}" ${MAX_CONTEXT:+--max-context "$MAX_CONTEXT"} --markdown-out "$run.md" \
      --json-out "$run.json" > "$run.log" 2>&1
    rc=$?
    echo "== ${BIN_LIST[$i]} (run $rep): exit $rc"
    [ $rc = 0 ] || status=1
    grep -E "batch [0-9]+: round" "$run.log" | sed -E 's/:(pool|lambda|large|stats)=[^ ]*//'
  done
done
exit $status
