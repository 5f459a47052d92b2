#!/usr/bin/env bash
# `make demo`: pull the embedded default model (once) and answer a reasoning question with Random
# Attention under a small KV budget, so eviction rounds really happen while the answer streams.
set -euo pipefail
kvdice=${1:-build/kvdice}
"$kvdice" pull default
question="A shop sells pencils at 3 for 2 dollars and notebooks at 4 dollars each. \
Maria buys 12 pencils and 3 notebooks and pays with a 50 dollar bill. How much change does she get? \
Solve it step by step, then check the result a second way."
"$kvdice" generate --model default --chat --prompt "$question" \
  --policy random_pp --budget 128 --window 32 --seed 7 \
  --temperature 0.3 --top-p 0.9 --max-new-tokens 400
