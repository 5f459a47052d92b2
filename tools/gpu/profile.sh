#!/usr/bin/env bash
# Per-kernel GPU time of a few decode steps (ncu, one metric, one pass; NCU=0 skips it), batch 1 and batch 128, on a
# random-weight checkpoint of SHAPE (default qwen3-4b), prompt PROMPT, budget BUDGET. Results under $OUT.
# TRACE=1: the CUPTI timeline of the decode graphs (POSITIONS=8,18,32: per layer position at batch 1). ATTENTION=1 /
# SAMPLER=1 / GEMV=1: a full ncu profile of one launch of decode attention with RoPE (decode_attention.cu) / of
# the sampler's finish (sample.cu) / of a batch-1 GEMV (gemv.cu) with its stall reasons per source line (NCU=0
# to run it alone). EVICT=1: the same for the batch-128 scoring round's kernels and H2O's signal (below;
# NCU=0 EVICT=1 for those alone). The fused decoder stack's profile: experiments/fused_decode/README.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT" .gpu
. tools/gpu/gpu-env.sh && gpu_library_path .gpu-bin/lib
SHAPE=${SHAPE:-qwen3-4b}
M=.gpu/$SHAPE
if [ "${NCU:-1}" = 1 ]; then
[ -f $M/config.json ] || python3 tools/gpu/make_checkpoint.py --shape configs/shapes/$SHAPE.json --out $M 2>&1 | tail -1
for batch in ${BATCHES:-1 128}; do
  ncu --metrics gpu__time_duration.sum --launch-skip ${SKIP:-800} --launch-count ${COUNT:-1200} --print-summary per-kernel \
    .gpu-bin/kvdice generate --backend cuda -m $M -p "${PROMPT:-hello world}" --samples $batch -n 16 --ignore-eos \
    --policy ${POLICY:-random_pp} --budget ${BUDGET:-256} --window 64 > "$OUT/ncu_b$batch.txt" 2>&1
  python3 - "$OUT/ncu_b$batch.txt" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
rows = []
for block in re.split(r"\n  (?=\S)", text):
    name = block.strip().splitlines()[0] if block.strip() else ""
    m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)\s+([\d.,]+)\s+([\d.,]+)", block)
    inv = re.search(r"(\d+) invocations", block) or re.search(r"Invocations\s*:?\s*(\d+)", block)
    if m:
        unit = m.group(1); avg = float(m.group(3).replace(",", ""))
        scale = {"ns": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}.get(unit, 1)
        n = int(inv.group(1)) if inv else 1
        rows.append((avg * scale * n, n, avg * scale, name[:110]))
rows.sort(reverse=True)
total = sum(r[0] for r in rows)
print(f"{sys.argv[1]}: total {total/1e3:.2f} ms over the profiled launches")
for t, n, a, name in rows[:14]:
    print(f"{t/1e3:9.2f} ms {100*t/max(total,1e-9):5.1f}%  {n:5d} x {a:9.2f} us  {name}")
PY
done
fi

# Real (unserialised) kernel times inside the decode graphs, and how much of the step the GPU idles:
# the CUPTI injection library (tools/gpu/kernel_trace.cpp; nsys is not installed there) records every
# graph node's start and end, and kernel_timeline.py splits them into steps.
if [ "${TRACE:-0}" = 1 ]; then
  for batch in ${BATCHES:-1 128}; do
    CUDA_INJECTION64_PATH="$PWD/.gpu-bin/lib/libkernel_trace.so" KERNEL_TRACE_OUT="$OUT/trace_b$batch.csv" \
      .gpu-bin/kvdice bench throughput --backend cuda --random-weights --config configs/shapes/$SHAPE.json \
      --requests $batch --prompt-len ${PROMPT_LEN:-1024} --output-len ${STEPS:-128} --policy ${POLICY:-random_pp} \
      --budget 2048 --window 64 > "$OUT/trace_b$batch.log" 2>&1
    python3 tools/gpu/kernel_timeline.py "$OUT/trace_b$batch.csv" --json "$OUT/timeline_b$batch.json" \
      > "$OUT/timeline_b$batch.txt" 2>&1
    head -30 "$OUT/timeline_b$batch.txt"
    # POSITIONS=8,18,32: one decoder layer's kernels by their place in the step (Qwen3 at batch 1).
    if [ -n "${POSITIONS:-}" ] && [ "$batch" = 1 ]; then
      python3 tools/gpu/kernel_timeline.py "$OUT/trace_b$batch.csv" --positions "$POSITIONS" | tail -12
    fi
    xz -T4 -f "$OUT/trace_b$batch.csv"  # ~1 MB: kept for a closer look
  done
fi

# One kernel in full: every ncu section of one launch (NAME_REGEX, after SKIP launches of it) of a command
# (profile_launch_of), by default a short batch-1 `bench latency` (profile_one_launch; EXTRA: more flags),
# then the source lines with the most warp stall samples. ncu serialises launches, so the duration is the
# kernel's alone, without its programmatic-launch overlap.
profile_one_launch() {
  local tag=$1 regex=$2 skip=$3; shift 3
  profile_launch_of "$tag" "$regex" "$skip" .gpu-bin/kvdice bench latency --backend cuda --random-weights \
    --config configs/shapes/$SHAPE.json --short-context 128 --long-context 129 --output-len 16 "$@"
}
profile_launch_of() {
  local tag=$1 regex=$2 skip=$3; shift 3
  ncu --set full --import-source yes --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count 1 \
    -o "$OUT/$tag" -f "$@" > "$OUT/${tag}_run.log" 2>&1 || tail -5 "$OUT/${tag}_run.log"
  ncu -i "$OUT/$tag.ncu-rep" --page details > "$OUT/${tag}_details.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy" "$OUT/${tag}_details.txt" | head -8
  ncu -i "$OUT/$tag.ncu-rep" --page source --print-source cuda,sass --csv > "$OUT/${tag}_source.csv" 2>&1
  python3 - "$OUT/${tag}_source.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((i for i, r in enumerate(rows) if any("Sampling" in c for c in r)), None)
if head is None:
    print("no source table:", " ".join(rows[0]) if rows else "empty"); sys.exit()
cols = rows[head]
samp = next(i for i, c in enumerate(cols) if "Warp Stall Sampling (All" in c)
src = next((i for i, c in enumerate(cols) if c in ("Source", "Address Source")), 1)
top = sorted((r for r in rows[head + 1:] if len(r) > samp and r[samp].replace(".", "").isdigit()),
             key=lambda r: -float(r[samp]))[:25]
total = sum(float(r[samp]) for r in rows[head + 1:] if len(r) > samp and r[samp].replace(".", "").isdigit())
for r in top:
    print(f"{100 * float(r[samp]) / max(total, 1):5.1f}%  {r[src][:150]}")
PY
}

# ATTENTION=1: one decode attention launch with RoPE (at batch 1 ~6.4 us a layer in the step's
# timeline, the largest step of the chain outside the GEMVs; docs/benchmarks.md, "Batch 1").
if [ "${ATTENTION:-0}" = 1 ]; then profile_one_launch attention decode_attention 200; fi

# SAMPLER=1: one launch of the exact sampler's finish (top-p on the random weights' flat logits: ~53 us of a
# 2.53 ms batch-1 step in the timeline of 641c8e8).
if [ "${SAMPLER:-0}" = 1 ]; then profile_one_launch sampler sample_finish 20; fi

# GEMV=1: one small-batch GEMV launch (gemv.cu), by default the 44th of the run (launch 0 is the prefill's
# one-row logits; then three a layer, O, gate/up and down, since the QKV projection is gemv_norm.cu's:
# 43 is layer 14's O, 44 its gate/up). GEMV_SKIP=42 took a down projection (grid 1,280, 20 us; 2026-12-03).
if [ "${GEMV:-0}" = 1 ]; then profile_one_launch gemv gemv_kernel "${GEMV_SKIP:-43}"; fi

# EVICT=1: one launch each of what a scoring round and H2O's signal spend their time in, under the table9
# preset's settings (docs/benchmarks.md, "Where a batch-128 round goes"): the fp32 windowed attention
# (snapkv_pp), SnapKV's, R-KV's, VaSE's and rkv_official's selections, rkv_official's spare search, and
# H2O's mass from the decode attention's logits. A model round is six launches of each round kernel, so
# SKIP 6 takes the second round's (batch 1 runs fewer launches: EVICT_SKIP=1). EVICT_BATCH (default
# 128) is the batch; EVICT_ONLY="tag ..." runs only those.
if [ "${EVICT:-0}" = 1 ]; then
  EV=(.gpu-bin/kvdice bench evict --random-weights --config configs/shapes/$SHAPE.json --backend cuda --preset table9
      --batches "${EVICT_BATCH:-128}" --repeats 2)
  evict_profile() {  # tag, kernel regex, skip, policy spec
    case " ${EVICT_ONLY:-$1} " in *" $1 "*) profile_launch_of "$1" "$2" "${EVICT_SKIP:-$3}" "${EV[@]}" --policies "$4" ;; esac
  }
  evict_profile window_tc window_means_tc_kernel 6 "snapkv_pp:pool=5,temperature=0.6,precision=fp32"
  evict_profile snapkv_selection scoring_selection_kernel 6 "snapkv_pp:pool=5,temperature=0.6,precision=fp32"
  evict_profile rkv_selection scoring_selection_kernel 6 "rkv_pp:lambda=0.1,pool=5,temperature=0.6,precision=fp32"
  evict_profile vase_selection scoring_selection_kernel 6 "vase_pp:large=0.25,pool=5,temperature=0.6,precision=fp32"
  # rkv_official's prepare and selection launches alternate under this name (ncu drops template arguments).
  evict_profile rkv_official_prepare scoring_selection_kernel 6 rkv_official
  evict_profile rkv_official_selection scoring_selection_kernel 7 rkv_official
  evict_profile rkv_official_spare spare_kernel 6 rkv_official
  # Split launches only (EVICT_BATCH=1): at batch 128 the decode attention adds the mass itself.
  evict_profile h2o_mass mass_from_logits_kernel 40 h2o_pp
fi
