#!/usr/bin/env bash
# Per-kernel GPU time of a few decode steps (ncu, one metric, one pass), batch 1 and batch 128, on a
# random-weight checkpoint of SHAPE (default qwen3-4b), prompt PROMPT, budget BUDGET. Results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvdice-out}; mkdir -p "$OUT" .gpu
CUBLAS_DIR=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$PWD/.gpu-bin/lib:$CUBLAS_DIR:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
SHAPE=${SHAPE:-qwen3-4b}
M=.gpu/$SHAPE
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

# Real (unserialised) kernel times inside the decode graphs, and how much of the step the GPU idles:
# nsys traces every graph node; the kernel-sum table against the run's decode time gives the gap share.
if [ "${NSYS:-0}" = 1 ] && command -v nsys >/dev/null; then
  for batch in ${BATCHES:-1 128}; do
    nsys profile -q --cuda-graph-trace=node -o "$OUT/nsys_b$batch" --force-overwrite true \
      .gpu-bin/kvdice generate --backend cuda -m $M -p "${PROMPT:-hello world}" --samples $batch -n ${STEPS:-256} \
      --ignore-eos --policy ${POLICY:-random_pp} --budget ${BUDGET:-256} --window 64 --json > "$OUT/nsys_b$batch.json" 2>/dev/null
    nsys stats -q -r cuda_gpu_kern_sum --format csv -o "$OUT/nsys_b$batch" "$OUT/nsys_b$batch.nsys-rep" >/dev/null 2>&1
    python3 - "$OUT/nsys_b${batch}_cuda_gpu_kern_sum.csv" "$OUT/nsys_b$batch.json" <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
total_ns = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"{sys.argv[1]}: kernels {total_ns/1e6:.1f} ms in all")
for r in sorted(rows, key=lambda r: -float(r["Total Time (ns)"]))[:12]:
    print(f'{float(r["Total Time (ns)"])/1e6:9.2f} ms {float(r["Time (%)"]):5.1f}% {int(r["Instances"]):7d} x {float(r["Avg (ns)"])/1e3:8.2f} us  {r["Name"][:90]}')
try:
    res = json.load(open(sys.argv[2])); res = res if isinstance(res, list) else [res]
    decode = max(x["stats"]["decode_seconds"] for x in res)
    print(f"decode wall {decode*1e3:.1f} ms (kernel time includes prefill)")
except Exception as e:
    print("no decode time:", e)
PY
  done
fi
