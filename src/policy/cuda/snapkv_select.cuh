// The device selection shared by snapkv and snapkv_pp: they differ only in the row's n_protected,
// which the engine sets from protects_prompt() (0 for snapkv), exactly as for the CPU select().
#pragma once

#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {

struct SnapKvDevice {
  __device__ static void select(const CudaSelectionArgs& args, const HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    HeadScratch w(scratch, args.capacity);
    age_order(h, w);
    windowed_attention_device(args, h, w, scratch);
    keep_prompt_and_highest_device(h, w, w.b, keep);
  }
};

}  // namespace kvdice::policy::cuda
