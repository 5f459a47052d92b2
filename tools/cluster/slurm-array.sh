#!/usr/bin/env bash
# One kvdice cell spread over a Slurm job array, one GPU per array task: task i runs shard i/N into
# its own results root, so no two processes ever share a SQLite file (network file systems lock it
# badly). A task that dies loses only the sequences it was decoding; resubmitting it (or the array)
# resumes each shard where it stopped. Merge once every task has finished:
#   kvdice eval merge --into $RESULTS $RESULTS/shard-*
# Submit (N array tasks, the cell's arguments after the script):
#   N=8 RESULTS=runs/qwen3-4b sbatch --array=0-7 tools/cluster/slurm-array.sh \
#       --model /models/Qwen3-4B --task math500 --dataset math500.jsonl --policy random_pp
# Each rank must see the same model, dataset path and kvdice build: the manifests must agree for the
# merge to accept the shards.
#SBATCH --job-name=kvdice-eval
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --output=kvdice-eval-%A_%a.log
set -euo pipefail
: "${N:?set N to the number of shards (the array size)}"
: "${RESULTS:?set RESULTS to the results root}"
: "${SLURM_ARRAY_TASK_ID:?run this under sbatch --array=0-$((N - 1))}"
KVDICE=${KVDICE:-kvdice}
I=$SLURM_ARRAY_TASK_ID
exec "$KVDICE" eval run --backend cuda --quiet --shard "$I/$N" --results "$RESULTS/shard-$I" "$@"
