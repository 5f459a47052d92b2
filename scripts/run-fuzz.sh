#!/usr/bin/env bash
# Builds the parser fuzzers (tests/fuzz, clang + libFuzzer + ASan/UBSan) in their own build folder and
# runs each one reproducibly: a fixed libFuzzer seed, a fixed number of runs, and a fresh corpus made
# from the committed fixtures (plus tests/fuzz/corpus/<target>/, where reproducers of fixed bugs are
# committed) in a temporary folder outside the build folder, with address space randomisation off. The
# same command on the same commit replays the same inputs, so a CI failure reproduces anywhere. Any crash, sanitizer report or exception
# other than kvdice::Error fails the script; the reproducer is left under <build>/artifacts/.
# Usage: scripts/run-fuzz.sh [build-dir] [max-seconds-per-target] [runs-per-target] [seed]
# The seconds are only a safety cap for slow machines (reaching it is reported: the run was cut short).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-fuzz}
seconds=${2:-60}
runs=${3:-}
seed=${4:-1}

cmake -S "$root/tests/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ > /dev/null
cmake --build "$build" -j 2

# Determinism needs more than -seed: libFuzzer's compare tables are indexed by code addresses, so address
# space randomisation changes which mutations it tries; -reload=0 stops it re-reading the corpus folder.
norandom=()
if setarch "$(uname -m)" -R true 2> /dev/null; then norandom=(setarch "$(uname -m)" -R); fi

corpus_root=$(mktemp -d "${TMPDIR:-/tmp}/kvdice-fuzz-corpus.XXXXXX")
trap 'rm -rf "$corpus_root"' EXIT
mkdir -p "$build/artifacts"
status=0
# target, default runs (about 15-20 s each on one CI core), fixture file pattern for the seed corpus
for spec in "gguf:36000:*.gguf" "safetensors:18000:*.safetensors" "config:150000:config.json" \
            "tokenizer:8000:tokenizer.json" "dataset:60000:*.jsonl" \
            "openai_request:200000:no-fixture-seeds"; do  # its seeds: tests/fuzz/corpus/openai_request
  IFS=: read -r target default_runs pattern <<< "$spec"
  corpus="$corpus_root/$target"
  mkdir -p "$corpus"
  while IFS= read -r file; do  # fixture folder in the name: several are called model.safetensors
    cp -f "$file" "$corpus/seed-$(basename "$(dirname "$file")")-$(basename "$file")"
  done < <(find "$root/tests/fixtures" -name "$pattern" -size -1024k | sort)
  if [ -d "$root/tests/fuzz/corpus/$target" ]; then cp -f "$root/tests/fuzz/corpus/$target"/* "$corpus/"; fi
  n=${runs:-$default_runs}
  echo "fuzz_$target: seed $seed, $n runs over $(ls "$corpus" | wc -l) corpus files (cap ${seconds}s)"
  dict=()
  if [ -f "$root/tests/fuzz/$target.dict" ]; then dict=(-dict="$root/tests/fuzz/$target.dict"); fi
  if ! "${norandom[@]}" "$build/fuzz_$target" "$corpus" "${dict[@]}" -seed="$seed" -runs="$n" -reload=0 \
      -max_total_time="$seconds" \
      -max_len=1048576 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$target-" \
      -print_final_stats=1 > "$build/fuzz_$target.log" 2>&1; then
    echo "fuzz_$target FAILED; log tail follows (full log: $build/fuzz_$target.log)"
    echo "reproduce: scripts/run-fuzz.sh $build $seconds $n $seed   (or: $build/fuzz_$target <artifact>)"
    tail -n 60 "$build/fuzz_$target.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz_$target.log" || true
    done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz_$target.log")
    if [ "${done_runs:-0}" -lt "$n" ]; then
      echo "fuzz_$target: the ${seconds}s cap stopped it after $done_runs of $n runs (not a full replay)"
    fi
  fi
done
exit $status
