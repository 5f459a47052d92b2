#!/usr/bin/env bash
# `make demo`: pull the embedded default model (once) and answer a reasoning question with Random
# Attention under a small KV budget, so eviction rounds really happen while the answer streams.
set -euo pipefail
kvdice=${1:-build/kvdice}
"$kvdice" pull default
question="Tom has 3 boxes with 12 apples each. He gives away 10 apples and then buys 5 more. \
How many apples does he have now? Explain each step, then verify the answer in a different way."
"$kvdice" generate --model default --chat --prompt "$question" \
  --policy random_pp --budget 128 --window 32 --seed 7 \
  --temperature 0.3 --top-p 0.9 --max-new-tokens 400
