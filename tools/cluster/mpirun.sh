#!/usr/bin/env bash
# One kvdice cell spread over the GPUs of one or more hosts with OpenMPI's launcher, one rank per GPU:
# rank i runs shard i/N (N = the world size) into its own results root, pinned to its host-local
# GPU. kvdice itself speaks no MPI; mpirun only starts the processes. A rank that dies loses only
# the sequences it was decoding; the same mpirun again resumes every shard. Then merge:
#   kvdice eval merge --into $RESULTS $RESULTS/shard-*
# Launch (8 GPUs on two hosts, the cell's arguments after the script):
#   RESULTS=runs/qwen3-4b mpirun -np 8 --map-by ppr:4:node -x RESULTS tools/cluster/mpirun.sh \
#       --model /models/Qwen3-4B --task math500 --dataset math500.jsonl --policy random_pp
set -euo pipefail
: "${RESULTS:?set RESULTS to the results root (and pass it with mpirun -x RESULTS)}"
: "${OMPI_COMM_WORLD_RANK:?run this under OpenMPI mpirun}"
KVDICE=${KVDICE:-kvdice}
I=$OMPI_COMM_WORLD_RANK
N=$OMPI_COMM_WORLD_SIZE
export CUDA_VISIBLE_DEVICES=${OMPI_COMM_WORLD_LOCAL_RANK:-0}
exec "$KVDICE" eval run --backend cuda --quiet --shard "$I/$N" --results "$RESULTS/shard-$I" "$@"
