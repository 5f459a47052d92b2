#!/usr/bin/env bash
# What the compiler made of one CUDA source, without a GPU: each kernel's registers, spills and static
# shared memory (ptxas -v), and with nvdisasm its sm_90a instruction count and most frequent opcodes.
# Compare two trees by running each tree's own copy (the includes come from the script's tree) to see
# what a change does to a kernel's code before a GPU run.
#
#   tools/gpu/kernel_code.sh BUILD_DIR SOURCE.cu [KERNEL_REGEX]
#   tools/gpu/kernel_code.sh build-cuda src/policy/cuda/window_scores_tc.cu window_means
#
# BUILD_DIR is a configured CUDA build tree (its generated/ headers). nvdisasm is found on PATH or as
# $NVDISASM; the CUDA toolkit's Debian install here lacks it, the PyPI wheel nvidia-cuda-nvdisasm
# carries it (`pip download --no-deps nvidia-cuda-nvdisasm`, unzip, nvidia/cu*/bin/nvdisasm).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR SOURCE.cu [KERNEL_REGEX]" >&2; exit 2; }
build=$1 source=$2 pattern=${3:-.}
[ -d "$build/generated" ] || { echo "$0: $build/generated: not a configured CUDA build tree" >&2; exit 2; }
[ -f "$source" ] || { echo "$0: $source: no such file" >&2; exit 2; }
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! "$nvcc" -DKVDICE_WITH_CUDA=1 -I"$build/generated" -I"$root/src" -O3 -DNDEBUG \
  -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++20 -cubin -Xptxas -v \
  -o "$work/k.cubin" "$source" 2> "$work/ptxas.txt"; then
  cat "$work/ptxas.txt" >&2
  echo "$0: $source did not compile (includes from $root/src)" >&2
  exit 1
fi

# ptxas -v: "Compiling entry function 'NAME'", then its spills and "Used N registers" lines.
awk -v pattern="$pattern" '
  /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
  /spill stores/ && name ~ pattern { sub(/.*: */, ""); spills = $0 }
  /Used [0-9]+ registers/ && name ~ pattern { sub(/.*Used/, "Used"); print name; print "  " $0 "; " spills }
' "$work/ptxas.txt"

disasm=${NVDISASM:-$(command -v nvdisasm || true)}
if [ -z "$disasm" ]; then
  echo "(no nvdisasm: instruction counts skipped)"
  exit 0
fi
"$disasm" -c "$work/k.cubin" > "$work/k.sass"
# Per kernel: instructions (one a 16-byte slot) and the ten most frequent opcodes, predicates dropped.
python3 - "$work/k.sass" "$pattern" <<'PY'
import collections, re, sys
text, pattern = open(sys.argv[1]).read().splitlines(), re.compile(sys.argv[2])
ops, kernel = collections.defaultdict(collections.Counter), None
for line in text:
    label = re.match(r"^([A-Za-z_][\w$]*):$", line)
    if label:
        kernel = label.group(1)
        continue
    slot = re.match(r"^\s*/\*[0-9a-f]+\*/\s*(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)", line)
    if slot and kernel and pattern.search(kernel):
        ops[kernel][slot.group(1)] += 1
for kernel, counter in ops.items():
    top = " ".join(f"{op} {n}" for op, n in counter.most_common(10))
    print(f"{kernel}\n  {sum(counter.values())} instructions: {top}")
PY
