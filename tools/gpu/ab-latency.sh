#!/usr/bin/env bash
# Batch-1 A/B of kvdice builds in one run on the GPU machine (carry [".gpu-carry"] from tools/gpu/pack-ab.sh):
# the CUDA suite of the SUITE build, each build's `bench latency` (Qwen3-4B shape, C++ random weights,
# 128- and 1,024-token contexts, 256 outputs) in turn, ROUNDS times, and the per-layer timeline of the
# TRACE builds. Summary on stdout and in $OUT/summary.txt.
#   BUILDS="main new" SUITE=new TRACE="main new" bash tools/gpu/ab-latency.sh
# POSITIONS (PERIOD,FIRST,COUNT for kernel_timeline.py): 7,16,32 for the seven kernels a layer of the
# current step (QKV with its norm, attention, O, norm, gate/up, silu_mul, down); 8,18,32 for a build with
# eight. The machine's start and transfers add ~200 s to the command.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -f .gpu-carry/var.tar.xz ] && tar xJf .gpu-carry/var.tar.xz
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT"
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-var/lib
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
T0=$(date +%s)
if [ -n "${SUITE:-}" ]; then
  T=$(date +%s)
  timeout 200 ".gpu-var/test_backend_$SUITE" --gtest_filter='Cuda*:*OnCuda*' > "$OUT/tests_$SUITE.log" 2>&1
  say "CUDA suite $SUITE: rc $? in $(( $(date +%s) - T )) s"
  grep -E "^\[  (PASSED|FAILED) |Failure" "$OUT/tests_$SUITE.log" | head -20 | tee -a "$S"
fi
# BACKEND=cpu SHAPE=qwen2.5-0.5b OUTPUT_LEN=8 rehearses the script here (no SUITE or TRACE).
# LONG_CONTEXT (1024; 129 makes both contexts one shape, for a timeline's step period), LATENCY_FLAGS: more
# flags for every run (e.g. --warmup-tokens 0).
LAT="bench latency --backend ${BACKEND:-cuda} --random-weights --config configs/shapes/${SHAPE:-qwen3-4b}.json
     --short-context 128 --long-context ${LONG_CONTEXT:-1024} --output-len ${OUTPUT_LEN:-256} ${LATENCY_FLAGS:-}"
for round in $(seq "${ROUNDS:-2}"); do
  for b in ${BUILDS:?BUILDS=\"main new\"}; do
    timeout "${LIMIT:-60}" ".gpu-var/kvdice_$b" $LAT --markdown-out "$OUT/latency_$b.md" > "$OUT/latency_$b.log" 2>&1
    rc=$?
    say "latency $b (round $round) rc $rc: $(tail -1 "$OUT/latency_$b.md" | grep -o 'short context 128[^<]*of [0-9.]* GB/s') | $(tail -1 "$OUT/latency_$b.md" | grep -o "long context ${LONG_CONTEXT:-1024}[^<]*ms/step")"
  done
done
# profile.sh runs .gpu-bin/kvdice with .gpu-bin/lib (the tracer library is there).
mkdir -p .gpu-bin/lib && cp -n .gpu-var/lib/* .gpu-bin/lib/
for b in ${TRACE:-}; do
  cp ".gpu-var/kvdice_$b" .gpu-bin/kvdice
  NCU=0 TRACE=1 BATCHES=1 PROMPT_LEN=128 POSITIONS=${POSITIONS:-8,18,32} OUT="$OUT/trace_$b" timeout 90 \
    bash tools/gpu/profile.sh > "$OUT/trace_$b.txt" 2>&1
  say "timeline $b rc $?:"
  grep -E "^[0-9]+ steps, |^step period" "$OUT/trace_$b.txt" | head -2 | tee -a "$S"  # wall, then period
  grep -A12 "^mean over" "$OUT/trace_$b.txt" | tee -a "$S"
  rm -f "$OUT/trace_$b"/*.csv.xz "$OUT/trace_$b"/*.json
done
say "ab-latency: $(( $(date +%s) - T0 )) s"
# The GPU machine hands back only a handful of files from $OUT: every log and timeline goes into one archive.
(cd "$OUT" && find . -type f ! -name summary.txt ! -name 'logs_*.tar.xz' |
  tar cJf "logs_$(date +%s).tar.xz" -T - --remove-files && find . -mindepth 1 -type d -empty -delete)
