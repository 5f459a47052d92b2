// random_block_pp on the device (twin of policy/random_block_pp.cpp): prompt protected; the other
// candidates in age order form blocks of B (numbered from cache slot 0 under grid=slot0, from the first
// candidate otherwise), block b gets draw_u64(b) of the (round, layer, KV head)
// stream, and the K_sel - pl candidates first in (draw descending, age ascending) order are kept. Equal
// draws keep the older block first and a block's candidates share its draw, so that order is the CPU's
// (score descending, position ascending): the first (~draw, age rank) keys, taken without a sort.
#include "policy/cuda/scoring.cuh"
#include "policy/policy_options.h"

namespace kvdice::policy {
namespace {

struct RandomBlockPpParams {
  int block = 32;
  bool from_slot0 = true;  // grid=slot0: blocks numbered from cache slot 0, prompt included
};

CudaParams bind_random_block_pp(PolicyOptions& options) {
  CudaParams params;
  auto& p = params.emplace<RandomBlockPpParams>();
  p.block = options.require_int("block");
  p.from_slot0 = options.require_string("grid") == "slot0";
  return params;
}

struct RandomBlockPpDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    const RandomBlockPpParams& params = args.params.as<RandomBlockPpParams>();
    cuda::HeadScratch w(scratch, args.capacity);
    const int first = h.n_protected;
    const int count = h.n_candidates - first;
    cuda::age_order(h, w, first);
    const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};
    const int origin = params.from_slot0 ? first : 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      const uint64_t draw = stream.draw_u64(static_cast<uint32_t>((origin + i) / params.block));
      w.sort[i] = {~draw, static_cast<uint32_t>(i), 0};
    }
    __syncthreads();
    for (int slot = threadIdx.x; slot < first; slot += blockDim.x) keep[slot] = 1;
    cuda::take_first_pairs(w.sort, count, h.keep - first, [&](uint32_t age) { keep[w.slot_of_age[age]] = 1; });
  }
};

void cuda_select_random_block_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<RandomBlockPpDevice>(args, stream);
}

}  // namespace

// The candidates' age order and the (~draw, age rank) keys live in the head scratch.
const CudaSelection cuda_file_random_block_pp{
    .select = cuda_select_random_block_pp, .bind = bind_random_block_pp, .head_scratch = true};

}  // namespace kvdice::policy
