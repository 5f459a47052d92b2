#!/usr/bin/env bash
# Every CUDA test in one command on the GPU machine: all of test_backend (op parity, the policies'
# parity at small and real shapes, engine parity; the parameterised Policies/* and Shapes/* suites
# included; no filter leaves anything out), each suite its own process so a slow or crashing suite
# hides no other, JOBS of them at once; beside them compute-sanitizer memcheck and racecheck over the
# kernels' tests. Prints one line per suite and one per sanitizer; exit status 0 only when every suite
# passed and both sanitizers report nothing.
#   bash tools/gpu/run-cuda-tests.sh                  # .gpu-bin/test_backend from tools/gpu/pack.sh
#   BIN=build-cuda/test_backend bash tools/gpu/run-cuda-tests.sh
# STAGES (tests memcheck racecheck), JOBS (8), SUITE_TIMEOUT (540 s a shard), SANITIZER_TIMEOUT (540 s a
# test under a sanitizer; each test is its own process, SANITIZER_JOBS (3) of them at once per tool),
# SPLIT (6: a suite of more tests runs one process per test), SKIP (suites left out, by name, e.g.
# "TransformersParity": it needs .gpu/ checkpoints). Logs: $OUT/cuda-tests-logs.tar.xz; summary on
# stdout and in $OUT/cuda-tests-summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/kvdice-out}
BIN=${BIN:-.gpu-bin/test_backend}
JOBS=${JOBS:-8}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-540}
SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-540}
SANITIZER_JOBS=${SANITIZER_JOBS:-3}
SPLIT=${SPLIT:-6}
SKIP=${SKIP:-}
STAGES=${STAGES:-tests memcheck racecheck}
has() { [[ " $STAGES " == *" $1 "* ]]; }
LOGS=$OUT/cuda-tests-logs
SUMMARY=$OUT/cuda-tests-summary.txt
rm -rf "$LOGS" && mkdir -p "$LOGS/shards"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
[ -x "$BIN" ] || { echo "no test binary at $BIN (run tools/gpu/pack.sh, or set BIN)" >&2; exit 2; }
case "$BIN" in /*) ;; *) BIN=$ROOT/$BIN ;; esac

. tools/gpu/gpu-env.sh
[ -d .gpu-bin/lib ] && gpu_library_path .gpu-bin/lib
link_source_path "$BIN" | tee -a "$SUMMARY"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$SUMMARY"
say "commit: $(cat "$(dirname "$BIN")/COMMIT" 2>/dev/null || git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"

# Kernel tests under the sanitizers: every op's parity case (Matmul's CPU half alone takes 20 s), the
# eviction ops with each family's selection once, the signals, and one engine run (graphs, PDL).
MEMCHECK_FILTER=${MEMCHECK_FILTER:-'CudaOps.*:CudaAttentionPlan.*:CudaSignals.*:CudaEvictPolicies.*:Policies/CudaEvict.*/0:Policies/CudaEvict.*/6:Policies/CudaEvict.*/9:Policies/CudaScoringPolicy.*/0:Policies/CudaScoringPolicy.*/4:Policies/CudaScoringPolicy.*/7:Policies/CudaScoringPolicy.*/11:Policies/CudaScoringPolicy.*/14:CudaTriAttention.Small*:CudaEngine.Mixed*:-CudaOps.Matmul'}
# Kernels whose warps share stages through shared memory: attention (decode with and without RoPE,
# prefill), the sampler's cluster descent, the selections' block sorts.
RACECHECK_FILTER=${RACECHECK_FILTER:-'CudaOps.RopeAttention*:CudaOps.Attention*:CudaOps.Sample*:Policies/CudaEvict.*/0:Policies/CudaScoringPolicy.*/0:Policies/CudaScoringPolicy.*/14:CudaTriAttention.Small*'}
sanitize() {  # tool filter: one process per test, SANITIZER_JOBS at once, each under its own timeout
  local tool=$1 filter=$2
  mkdir -p "$LOGS/$tool"
  "$BIN" --gtest_list_tests --gtest_filter="$filter" | awk '/^[^ ]/ {suite = $1; next} {print suite $1}' \
    > "$LOGS/$tool/tests.txt"
  xargs -a "$LOGS/$tool/tests.txt" -P "$SANITIZER_JOBS" -I{} bash -c '
    extra=(); [ "$1" = racecheck ] && extra=(--racecheck-report hazard)
    log="$LOGS/$1/$(echo "$2" | tr "/." "__").log"
    timeout "$SANITIZER_TIMEOUT" "$SANITIZER" --tool "$1" "${extra[@]}" --error-exitcode 99 \
      "$BIN" --gtest_filter="$2" > "$log" 2>&1
    echo "$? $2" >> "$LOGS/$1/rc.txt"' _ "$tool" {}
}
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
export BIN LOGS SANITIZER SANITIZER_TIMEOUT
pids=()
has memcheck && { sanitize memcheck "$MEMCHECK_FILTER" & pids+=($!); }
has racecheck && { sanitize racecheck "$RACECHECK_FILTER" & pids+=($!); }

status=0
T0=$(date +%s)
if has tests; then
  # Shards: "suite" (a whole suite) or "suite.test" (one test of a large suite).
  "$BIN" --gtest_list_tests > "$LOGS/list.txt" 2>&1 || { say "cannot list the tests:"; tail -5 "$LOGS/list.txt"; exit 2; }
  awk -v limit="$SPLIT" -v skip=" $SKIP " '
    /^[^ ]/ { if ($1 !~ /\.$/) next; suite = $1; sub(/\.$/, "", suite); order[++n] = suite; next }
    /^  / { t = $1; tests[suite] = tests[suite] " " t; count[suite]++ }
    END {
      for (i = 1; i <= n; i++) {
        s = order[i]; base = s; sub(/^.*\//, "", base)
        if (index(skip, " " s " ") || index(skip, " " base " ")) continue
        if (count[s] > limit) { m = split(substr(tests[s], 2), ts, " "); for (j = 1; j <= m; j++) print s "." ts[j] }
        else print s
      }
    }' "$LOGS/list.txt" > "$LOGS/shards.txt"
  run_shard() {  # one line of shards.txt
    local shard=$1 filter name t rc
    case "$shard" in *.*) filter=$shard ;; *) filter="$shard.*" ;; esac
    name=$(echo "$shard" | tr '/.' '__')
    t=$(date +%s)
    timeout "$SUITE_TIMEOUT" "$BIN" --gtest_filter="$filter" > "$LOGS/shards/$name.log" 2>&1
    rc=$?
    echo "$rc $(( $(date +%s) - t ))" > "$LOGS/shards/$name.rc"
  }
  export -f run_shard
  export BIN LOGS SUITE_TIMEOUT
  xargs -a "$LOGS/shards.txt" -d '\n' -P "$JOBS" -I{} bash -c 'run_shard "$1"' _ {}
  # One line per suite: its shards' passed, failed and skipped tests, timeouts and crashes.
  say "suite | passed | failed | skipped | shards timed out | shards crashed | slowest shard s"
  all_pass=0 all_fail=0 all_skip=0 all_tout=0 all_crash=0
  # Suite names hold no dot; a shard is "suite" or "suite.test".
  for suite in $(cut -d. -f1 "$LOGS/shards.txt" | awk '!seen[$0]++'); do
    pass=0 fail=0 skip=0 tout=0 crash=0 slow=0
    for shard in $(awk -F. -v s="$suite" '$1 == s' "$LOGS/shards.txt"); do
      name=$(echo "$shard" | tr '/.' '__')
      log=$LOGS/shards/$name.log
      read -r rc secs < "$LOGS/shards/$name.rc" || { rc=1; secs=0; }
      # A test's own result line ends in its time; gtest's closing list repeats FAILED and SKIPPED without it.
      p=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$log"); f=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log")
      s=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log")
      pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
      [ "$secs" -gt "$slow" ] && slow=$secs
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then tout=$((tout + 1))
      elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then crash=$((crash + 1)); fi
    done
    [ $((fail + tout + crash)) -gt 0 ] && status=1
    say "$suite | $pass | $fail | $skip | $tout | $crash | $slow"
    all_pass=$((all_pass + pass)); all_fail=$((all_fail + fail)); all_skip=$((all_skip + skip))
    all_tout=$((all_tout + tout)); all_crash=$((all_crash + crash))
  done
  say "all | $all_pass | $all_fail | $all_skip | $all_tout | $all_crash |"
  grep -hE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$LOGS"/shards/*.log | head -40 | sed 's/^/  /' | tee -a "$SUMMARY"
  say "tests: $(wc -l < "$LOGS/shards.txt") shards in $(( $(date +%s) - T0 )) s"
fi
for pid in "${pids[@]}"; do wait "$pid"; done
for tool in memcheck racecheck; do
  has $tool || continue
  total=$(wc -l < "$LOGS/$tool/tests.txt" 2>/dev/null || echo 0)
  clean=$(awk '$1 == 0' "$LOGS/$tool/rc.txt" 2>/dev/null | wc -l)
  found=$(awk '$1 == 99 {print $2}' "$LOGS/$tool/rc.txt" 2>/dev/null | tr '\n' ' ')
  cut=$(awk '$1 == 124 || $1 == 137 {print $2}' "$LOGS/$tool/rc.txt" 2>/dev/null | tr '\n' ' ')
  other=$(awk '$1 != 0 && $1 != 99 && $1 != 124 && $1 != 137 {print $2 " (rc " $1 ")"}' "$LOGS/$tool/rc.txt" 2>/dev/null | tr '\n' ' ')
  [ "$clean" = "$total" ] && [ "$total" -gt 0 ] || status=1
  say "compute-sanitizer $tool: $clean of $total tests clean; reports in: ${found:-none}; timed out: ${cut:-none}; failed otherwise: ${other:-none}"
done
tar cJf "$OUT/cuda-tests-logs.tar.xz" -C "$OUT" cuda-tests-logs && rm -rf "$LOGS"
say "status $status (0: every suite passed, the sanitizers found nothing)"
exit $status
