#!/usr/bin/env bash
# The peers, side by side on the GPU machine, on one HF checkpoint (e.g. tools/gpu/make_checkpoint.py's
# random Qwen3-4B): llama.cpp (CUDA, f16 GGUF, flash attention, llama-batched-bench) and the paper's HF
# harness method (hf_random_pp.py: transformers, sdpa, DynamicCache, random_pp between steps).
#
#   bash .gpu-peers/run-peers.sh CHECKPOINT_DIR OUT_DIR
#
# Needs the pack made by tools/peers/build_llama_cpp.sh (.gpu-peers/: bin/llama-batched-bench.xz,
# llama.cpp/{convert_hf_to_gguf.py,conversion,gguf-py}, these scripts) and python3 with torch +
# transformers. No network. Writes every raw log, summary.json and summary.md under OUT_DIR; the
# GGUF (~8 GB) goes to SCRATCH (default /tmp/kvdice-peers), never to OUT_DIR.
#
# Every piece runs under `timeout`, and a piece is skipped when less than its limit is left of
# BUDGET_S (default 450 s), so one hang cannot eat the run. Knobs (environment, defaults shown):
#   BUDGET_S=450  STAGES="convert llama hf"  SCRATCH=/tmp/kvdice-peers  PYTHON=python3
#   PEER_TOKENIZER=small (GGUF tokenizer: small | own | auto)
#   LLAMA_B1="128 128"  LLAMA_B128="1024 1024"  LLAMA_B128_SHORT="256 1024" (empty: skipped)   (prompt, generated)
#   HF_BATCH=128  HF_PROMPT=1024  HF_GEN=1024  HF_RP_GEN=1536  HF_B1_GEN=128  HF_BUDGET=2048
#   HF_WINDOW=64  HF_DEVICE=cuda  HF_DTYPE=bf16
# (the small values make a CPU smoke test on a tiny checkpoint possible; the defaults are the protocol)
# HF generated lengths are capped (HF decodes at ~2-3k tok/s at batch 128): full attention at batch
# 128 runs 1,024 prompt + HF_GEN=1,024 generated (2k KV); random_pp T=2048 r=64 needs more than
# T + r - 1,024 = 1,088 generated tokens before its first round, so it runs HF_RP_GEN=1,536
# (8 rounds) and also reports the steady state from the first round on.
set -uo pipefail

CKPT="${1:?usage: run-peers.sh CHECKPOINT_DIR OUT_DIR}"
OUT="${2:?usage: run-peers.sh CHECKPOINT_DIR OUT_DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
if [[ -d "$HERE/llama.cpp" ]]; then  # run from inside a pack (.gpu-peers/run-peers.sh)
  PACK="${PACK:-$HERE}"
elif [[ -d "$(cd "$HERE/../.." && pwd)/.gpu-peers" ]]; then
  PACK="${PACK:-$(cd "$HERE/../.." && pwd)/.gpu-peers}"
else  # no llama.cpp pack: the HF harness alone, from this folder
  PACK="${PACK:-$HERE}"
  STAGES="${STAGES:-hf}"
fi
SCRATCH="${SCRATCH:-/tmp/kvdice-peers}"
BUDGET_S="${BUDGET_S:-450}"
STAGES="${STAGES:-convert llama hf}"
HF_GEN="${HF_GEN:-1024}"
HF_RP_GEN="${HF_RP_GEN:-1536}"
HF_B1_GEN="${HF_B1_GEN:-128}"
HF_BATCH="${HF_BATCH:-128}"
HF_PROMPT="${HF_PROMPT:-1024}"
HF_BUDGET="${HF_BUDGET:-2048}"
HF_WINDOW="${HF_WINDOW:-64}"
HF_DEVICE="${HF_DEVICE:-cuda}"
HF_DTYPE="${HF_DTYPE:-bf16}"
LLAMA_BATCH="${LLAMA_BATCH:-128}"
read -r B1_PP B1_TG <<<"${LLAMA_B1:-128 128}"
read -r B128_PP B128_TG <<<"${LLAMA_B128:-1024 1024}"
read -r B128S_PP B128S_TG <<<"${LLAMA_B128_SHORT-256 1024}"
PY="${PYTHON:-python3}"
# The GGUF's tokenizer: the 746-token fixture one, padded to the checkpoint's vocabulary (the path
# known to load in llama.cpp; throughput does not depend on the vocabulary's contents). `auto`
# tries the checkpoint's own synthetic full-vocabulary tokenizer first.
PEER_TOKENIZER="${PEER_TOKENIZER:-small}"

[[ -f "$CKPT/config.json" ]] || { echo "error: $CKPT/config.json not found (not an HF checkpoint)" >&2; exit 2; }
mkdir -p "$OUT" "$SCRATCH" || exit 2
START=$(date +%s)
STATUS="$OUT/status.tsv"
printf 'piece\trc\tseconds\n' > "$STATUS"

left() { echo $((BUDGET_S - ($(date +%s) - START))); }
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }

# piece NAME LIMIT_S CMD...: runs CMD under timeout (capped at the time left), logs to OUT/NAME.log.
piece() {
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  if (( l < 20 )); then
    echo "== $name: skipped, only ${l}s of BUDGET_S left" | tee "$OUT/$name.log"
    printf '%s\tskipped\t0\n' "$name" >> "$STATUS"; return 1
  fi
  (( limit > l )) && limit=$l
  echo "== $name (limit ${limit}s): $*" | tee "$OUT/$name.log"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >> "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$STATUS"
  echo "   rc=$rc in $((SECONDS - t0))s"; tail -n 3 "$OUT/$name.log" | sed 's/^/   | /'
  return $rc
}

{
  echo "date: $(date -u +%FT%TZ)"; echo "checkpoint: $CKPT"; echo "pack: $PACK"
  cat "$PACK/BUILD-INFO.txt" 2>/dev/null
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>&1
} > "$OUT/env.txt"
cat "$OUT/env.txt"

# --- llama.cpp binary: unpack, and find cuBLAS 13 if the loader does not -----------------------
BIN="$SCRATCH/llama-batched-bench"
if has_stage llama; then
  if [[ ! -f "$PACK/bin/llama-batched-bench.xz" && ! -f "$PACK/bin/llama-batched-bench" ]]; then
    echo "warning: no llama-batched-bench in $PACK/bin: the llama.cpp runs are skipped"
    printf 'llama\tno-binary\t0\n' >> "$STATUS"
  elif [[ -f "$PACK/bin/llama-batched-bench.xz" ]]; then
    # python's lzma, not xz(1): the GPU machine is not known to have xz-utils.
    "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$PACK/bin/llama-batched-bench.xz" "$BIN" && chmod +x "$BIN"
  else
    cp "$PACK/bin/llama-batched-bench" "$BIN"
  fi
  if ldd "$BIN" | grep -q "not found"; then
    # torch's wheels ship cudart and cuBLAS 13 under site-packages/nvidia/*/lib; point the loader there.
    extra=$("$PY" - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
print(":".join(sorted({os.path.dirname(p) for r in roots for p in glob.glob(r + "/nvidia/*/lib/libcu*.so*")})))
EOF
)
    export LD_LIBRARY_PATH="${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  if [[ -x "$BIN" ]]; then
    ldd "$BIN" > "$OUT/llama-ldd.txt" 2>&1
    grep "not found" "$OUT/llama-ldd.txt" && echo "warning: llama-batched-bench misses libraries (see llama-ldd.txt)"
  fi
fi

GGUF="$SCRATCH/model-f16.gguf"
if has_stage convert || has_stage llama; then
  if [[ -s "$GGUF" && -z "${RECONVERT:-}" ]]; then
    echo "== convert: reusing $GGUF"
  else
    piece convert 240 "$PY" "$PACK/make_peer_gguf.py" --model "$CKPT" --out "$GGUF" \
      --llama-cpp "$PACK/llama.cpp" --outtype f16 --tokenizer "$PEER_TOKENIZER" || rm -f "$GGUF"
  fi
fi

# llama-batched-bench: prompt not shared, so each of B sequences holds PP+TG tokens of KV; -c is
# the total (split evenly over the B sequences). f16 KV, flash attention, all layers on the GPU.
llama_run() {  # NAME PP TG B
  local name=$1 pp=$2 tg=$3 b=$4
  piece "$name" 150 "$BIN" -m "$GGUF" -c $((b * (pp + tg))) -b 2048 -ub 512 -ngl 99 -fa on \
    -ctk f16 -ctv f16 -npp "$pp" -ntg "$tg" -npl "$b" --output-format jsonl
}
if has_stage llama && [[ -x "$BIN" && ! -s "$GGUF" ]]; then
  printf 'llama\tno-gguf\t0\n' >> "$STATUS"
fi
if has_stage llama && [[ -s "$GGUF" && -x "$BIN" ]]; then
  llama_run llama_b1 "$B1_PP" "$B1_TG" 1
  llama_run "llama_b${LLAMA_BATCH}" "$B128_PP" "$B128_TG" "$LLAMA_BATCH"
  # LLAMA_B128_SHORT="" skips the short-context batch run (a run short of time).
  [[ -n "$B128S_PP" ]] && llama_run "llama_b${LLAMA_BATCH}_short" "$B128S_PP" "$B128S_TG" "$LLAMA_BATCH"
fi

if has_stage hf; then
  HF=("$PY" "$PACK/hf_random_pp.py" --model "$CKPT" --device "$HF_DEVICE" --dtype "$HF_DTYPE" --seed 0)
  # the headline peer first, so a short budget loses the least important run
  piece "hf_b${HF_BATCH}_random_pp" 200 "${HF[@]}" --batch "$HF_BATCH" --prompt-len "$HF_PROMPT" \
    --gen "$HF_RP_GEN" --policy random_pp --budget "$HF_BUDGET" --window "$HF_WINDOW" \
    --out "$OUT/hf_b${HF_BATCH}_random_pp.json"
  piece "hf_b${HF_BATCH}_full" 200 "${HF[@]}" --batch "$HF_BATCH" --prompt-len "$HF_PROMPT" --gen "$HF_GEN" \
    --policy full --out "$OUT/hf_b${HF_BATCH}_full.json"
  piece hf_b1_full 120 "${HF[@]}" --batch 1 --prompt-len "$B1_PP" --gen "$HF_B1_GEN" --policy full \
    --out "$OUT/hf_b1_full.json"
fi

"$PY" "$PACK/summarize_peers.py" "$OUT" --seconds $(( $(date +%s) - START ))
echo "== done in $(( $(date +%s) - START ))s; results in $OUT"
