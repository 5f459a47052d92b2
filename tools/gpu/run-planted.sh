#!/usr/bin/env bash
# The GPU planted-bug campaign, run half (GPU machine, carry [".gpu-carry"] built by
# tools/gpu/planted-bugs.sh): for each planted binary, the tests campaign.tsv names for its patch (the
# ones that should catch it and the older ones that should not), and the same filter on the unpatched
# binary as the control. A patch is caught when one of its tests fails while the control passes them
# all; missed when all pass; "control fails" when the unpatched binary already fails that filter.
# One line per patch (patch | family | result | failing tests | s), also in $OUT/planted-summary.md;
# logs in $OUT/planted-logs.tar.xz.
#   bash tools/gpu/run-planted.sh
#   ONLY='random|recency|streaming' JOBS=6 bash tools/gpu/run-planted.sh   # patches whose name matches
# JOBS (6 processes at once; each CPU reference is one core, the GPU is shared), TIMEOUT (480 s a
# process), BUDGET (seconds from the start after which no new process starts; the patches left are
# reported "not run", so the summary is always written). A command runs at most 10 minutes there: split
# the campaign with ONLY into a few runs, or set BUDGET.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}
JOBS=${JOBS:-6}
TIMEOUT=${TIMEOUT:-480}
BUDGET=${BUDGET:-100000}
ONLY=${ONLY:-.}
P=.planted/bin
CAMPAIGN=tools/gpu/planted/campaign.tsv  # the tree's: filters may change without rebuilding
LOGS=$OUT/planted-logs
rm -rf "$LOGS" && mkdir -p "$LOGS" .planted
[ -f .gpu-carry/planted.tar.xz ] || { echo "no .gpu-carry/planted.tar.xz (run tools/gpu/planted-bugs.sh and carry .gpu-carry)"; exit 2; }
rm -rf "$P" && tar xJf .gpu-carry/planted.tar.xz -C .planted
. tools/gpu/gpu-env.sh && gpu_library_path "$P/lib"
link_source_path "$P/test_backend_base"
SUMMARY=$OUT/planted-summary.md
echo "planted-bug campaign at $(cat "$P/COMMIT"), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" | tee "$SUMMARY"

# Jobs: "binary patch" for every selected patch, and "base patch" for its control.
tail -n +2 "$CAMPAIGN" | cut -f1 | grep -E "$ONLY" > "$LOGS/selected.txt"
[ -s "$LOGS/selected.txt" ] || { echo "no patch matches ONLY=$ONLY"; exit 2; }
while read -r name; do
  [ -x "$P/test_backend_$name" ] || { echo "$name: no binary (not built)" >> "$LOGS/not-built.txt"; continue; }
  echo "$name $name"
  echo "base $name"
done < "$LOGS/selected.txt" > "$LOGS/jobs.txt"
run_job() {  # binary patch
  local filter t
  [ $(( $(date +%s) - T0 )) -ge "$BUDGET" ] && return 0  # no .rc: reported "not run"
  filter=$(awk -F'\t' -v n="$2" '$1 == n {print $4}' "$CAMPAIGN")
  t=$(date +%s)
  timeout "$TIMEOUT" "$P/test_backend_$1" --gtest_filter="$filter" > "$LOGS/$2.$1.log" 2>&1
  echo "$? $(( $(date +%s) - t ))" > "$LOGS/$2.$1.rc"
}
export -f run_job
T0=$(date +%s)
export P LOGS TIMEOUT CAMPAIGN BUDGET T0
xargs -a "$LOGS/jobs.txt" -P "$JOBS" -n 2 bash -c 'run_job "$1" "$2"' _

failing() {  # log: the tests whose own result line says FAILED
  grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$1" | sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/'
}
echo "| patch | family | result | failing tests | s |" | tee -a "$SUMMARY"
echo "|---|---|---|---|---|" | tee -a "$SUMMARY"
caught=0 missed=0 other=0
while read -r name; do
  family=$(awk -F'\t' -v n="$name" '$1 == n {print $2}' "$CAMPAIGN")
  if [ ! -x "$P/test_backend_$name" ]; then
    result="not built"; tests=""; secs=""; other=$((other + 1))
  elif [ ! -f "$LOGS/$name.$name.rc" ] || [ ! -f "$LOGS/$name.base.rc" ]; then
    result="not run (BUDGET)"; tests=""; secs=""; other=$((other + 1))
  else
    read -r rc secs < "$LOGS/$name.$name.rc"
    read -r base_rc _ < "$LOGS/$name.base.rc"
    tests=$(failing "$LOGS/$name.$name.log" | head -4 | tr '\n' ' ')
    if [ "$base_rc" != 0 ]; then
      result="control fails (rc $base_rc: $(failing "$LOGS/$name.base.log" | head -2 | tr '\n' ' '))"; other=$((other + 1))
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      result="timed out"; other=$((other + 1))
    elif grep -qE 'no CUDA (device|GPU) (is )?visible' "$LOGS/$name.$name.log"; then
      result="no GPU visible: the CUDA cases skipped"; other=$((other + 1))
    elif [ -n "$tests" ]; then
      result="caught"; caught=$((caught + 1))
    elif [ "$rc" != 0 ]; then
      result="caught (crash, rc $rc)"; tests=$(grep -E '^\[ RUN      \]' "$LOGS/$name.$name.log" | tail -1 | cut -c14-)
      caught=$((caught + 1))
    else
      result="MISSED"; missed=$((missed + 1))
    fi
  fi
  echo "| $name | $family | $result | $tests | $secs |" | tee -a "$SUMMARY"
done < "$LOGS/selected.txt"
echo "caught $caught, missed $missed, other $other in $(( $(date +%s) - T0 )) s" | tee -a "$SUMMARY"
tar cJf "$OUT/planted-logs.tar.xz" -C "$OUT" planted-logs && rm -rf "$LOGS"
[ "$missed" = 0 ] && [ "$other" = 0 ]
