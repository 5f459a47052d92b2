#!/usr/bin/env bash
# A CPU rehearsal of run-peers.sh on the tiny Qwen3 fixture, here, before the GPU run: the
# packed llama-batched-bench (CUDA build) runs on the CPU backend with the CUDA driver stub (its
# CUDA init fails cleanly: no device), the converter and the HF harness run on CPU at toy sizes.
# Checks that every piece exits 0 and that summary.json has all six rows.
#
#   tools/peers/smoke-cpu.sh [PACK_DIR]     # default .gpu-peers; PYTHON= a python with torch + transformers
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PACK="$(cd "${1:-$ROOT/.gpu-peers}" && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=python3
  [[ -x "$ROOT/.peers-build/venv/bin/python" ]] && PYTHON="$ROOT/.peers-build/venv/bin/python"
fi
export PYTHON
TMP="$(mktemp -d /tmp/peers-smoke.XXXXXX)"
STUB=""
for d in /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs; do
  [[ -f "$d/libcuda.so" ]] && STUB="$d/libcuda.so" && break
done
if [[ -n "$STUB" ]] && ! ldconfig -p | grep -q "libcuda.so.1 "; then
  mkdir -p "$TMP/stub" && ln -s "$STUB" "$TMP/stub/libcuda.so.1"
  export LD_LIBRARY_PATH="$TMP/stub:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
SCRATCH="$TMP/scratch" BUDGET_S=600 PEER_TOKENIZER=auto \
  LLAMA_BATCH=4 LLAMA_B1="16 16" LLAMA_B128="32 32" LLAMA_B128_SHORT="16 32" \
  HF_BATCH=2 HF_PROMPT=20 HF_GEN=40 HF_RP_GEN=120 HF_BUDGET=64 HF_WINDOW=16 HF_B1_GEN=16 \
  HF_DEVICE=cpu HF_DTYPE=f32 \
  bash "$PACK/run-peers.sh" "$ROOT/tests/fixtures/qwen3" "$TMP/out"
"$PYTHON" - "$TMP/out" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
bad = [p for p in s["pieces"] if p["rc"] != "0"]
runs = sorted(r["run"] for r in s["rows"])
print("rows:", runs)
assert not bad, f"pieces failed: {bad}"
assert len(runs) == 6, f"expected 6 rows, got {len(runs)}"
rp = [r for r in s["rows"] if r["run"].endswith("random_pp")][0]
assert rp["eviction_rounds"] == 4, rp
print("smoke OK")
EOF
echo "outputs in $TMP/out"
