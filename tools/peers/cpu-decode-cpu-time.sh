#!/usr/bin/env bash
# One-thread decode of the default model as CPU time per token, kvdice beside llama.cpp: a figure that
# other jobs on a shared machine disturb far less than tokens per second of wall time do (they still
# share the memory bus and the L3). Each engine generates N_SHORT and N_LONG tokens (EOS ignored);
# (user seconds of the long run - of the short run) / (N_LONG - N_SHORT) is the decode step's CPU time,
# with loading, the prompt and warm-up cancelled out. Alternates the engines round by round; one CSV
# row per engine and round.
#
#   tools/peers/cpu-decode-cpu-time.sh                  # ROUNDS=3 N_SHORT=8 N_LONG=136
#   KVDICE_BASELINE=/path/to/older/kvdice tools/peers/cpu-decode-cpu-time.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KVDICE="${KVDICE:-$ROOT/build/kvdice}"
LLAMA_BENCH="${LLAMA_BENCH:-$ROOT/.peers-build/build-cpu/bin/llama-bench}"
MODEL="${MODEL:-$("$KVDICE" pull default 2>/dev/null | tail -1)}"
ROUNDS="${ROUNDS:-3}"
N_SHORT="${N_SHORT:-8}"
N_LONG="${N_LONG:-136}"
(( N_LONG > N_SHORT )) || { echo "error: N_LONG ($N_LONG) must exceed N_SHORT ($N_SHORT)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# User CPU seconds of a command (its output discarded).
user_seconds() {
  /usr/bin/time -f "%U" -o "$tmp/time" "$@" > /dev/null 2>&1
  cat "$tmp/time"
}
kvdice_run() {  # binary, tokens
  user_seconds "$1" generate --model "$MODEL" -p Hi -n "$2" --ignore-eos --policy full --threads 1
}
llama_run() {  # tokens
  user_seconds "$LLAMA_BENCH" -m "$MODEL" -t 1 -p 0 -n "$1" -r 1
}
row() {  # round, engine, short seconds, long seconds
  python3 -c "
import sys
r, e, a, b, n = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
load = open('/proc/loadavg').read().split()[0]
print(f'{r},{e},{(b - a) / n * 1e3:.1f},{load}')" "$1" "$2" "$3" "$4" $((N_LONG - N_SHORT))
}

echo "round,engine,decode_cpu_ms_per_token,loadavg"
for round in $(seq 1 "$ROUNDS"); do
  row "$round" kvdice "$(kvdice_run "$KVDICE" "$N_SHORT")" "$(kvdice_run "$KVDICE" "$N_LONG")"
  if [[ -n "${KVDICE_BASELINE:-}" ]]; then
    row "$round" kvdice-baseline "$(kvdice_run "$KVDICE_BASELINE" "$N_SHORT")" \
      "$(kvdice_run "$KVDICE_BASELINE" "$N_LONG")"
  fi
  if [[ -x "$LLAMA_BENCH" ]]; then
    row "$round" llama.cpp "$(llama_run "$N_SHORT")" "$(llama_run "$N_LONG")"
  fi
done
