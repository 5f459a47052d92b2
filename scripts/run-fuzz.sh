#!/usr/bin/env bash
# Builds the parser fuzzers (tests/fuzz, clang + libFuzzer + ASan/UBSan) in their own build folder and
# runs each for a bounded time on a corpus seeded from the committed fixtures. Any crash, sanitizer
# report or exception other than kvdice::Error fails the script; the reproducer is left under
# <build>/artifacts/. Usage: scripts/run-fuzz.sh [build-dir] [seconds-per-target]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-fuzz}
seconds=${2:-20}

cmake -S "$root/tests/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ > /dev/null
cmake --build "$build" -j 2

mkdir -p "$build/artifacts"
status=0
for target in gguf safetensors; do
  corpus="$build/corpus/$target"  # kept between runs, so later runs start from what earlier ones found
  mkdir -p "$corpus"
  while IFS= read -r seed; do  # fixture folder in the name: several are called model.safetensors
    cp -f "$seed" "$corpus/seed-$(basename "$(dirname "$seed")")-$(basename "$seed")"
  done < <(find "$root/tests/fixtures" -name "*.$target" -size -1024k)
  echo "fuzz_$target: ${seconds}s over $(ls "$corpus" | wc -l) corpus files"
  if ! "$build/fuzz_$target" "$corpus" -max_total_time="$seconds" -max_len=1048576 -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$target-" -print_final_stats=1 \
      > "$build/fuzz_$target.log" 2>&1; then
    echo "fuzz_$target FAILED; log tail follows (full log: $build/fuzz_$target.log)"
    tail -n 60 "$build/fuzz_$target.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz_$target.log" || true
  fi
done
exit $status
