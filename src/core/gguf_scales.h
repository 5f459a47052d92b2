// The packed 6-bit sub-block scales of GGUF's K-quant blocks, read by both the dequantiser
// (formats/gguf_dequant) and the CPU backend's block kernels (backend/cpu/quant_dot).
#pragma once

#include <cstdint>

namespace kvdice {

// The 6-bit scale and minimum of sub-block j of a Q4_K/Q5_K block (12 packed bytes at q).
inline void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace kvdice
