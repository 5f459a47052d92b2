// TriAttention's calibration statistics (docs/reference.md §2; written by `kvdice calibrate`, read by the
// `triattention` policy). Per (layer, query head, RoPE frequency band f), over every token of a
// calibration text: the complex mean E[q_f] of the pre-RoPE query (after q_norm), band f's real part
// being dim f and its imaginary part dim f + D/2 (rotate-half RoPE), and the mean magnitude E|q_f|.
//
// File format (docs/policies.md): one safetensors file, so numpy/torch/safetensors read it as is and
// our own validated header parser (formats/safetensors.h) reads it back. Tensors, all F32:
//   q_mean_real, q_mean_imag, q_abs_mean  [n_layers, n_heads, head_dim / 2]
//   omega                                 [head_dim / 2]  RoPE inverse frequency of each band
//   freq_scale                            [head_dim / 2]  RoPE magnitude per band (1: no attention scaling)
//   q_weight_norm                         [n_layers]      Frobenius norm of each layer's q projection
// __metadata__ (strings): format = "kvdice-triattention-stats", version = "1", architecture, model,
// n_layers, n_heads, n_kv_heads, head_dim, rope_theta, text, text_sha256, tokens, validity.
// q_weight_norm is the model's fingerprint: statistics are refused for a model whose shapes, RoPE
// frequencies or q projection norms (relative 1e-3) differ.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "policy/eviction_policy.h"

namespace kvdice::policy {

struct TriAttentionStats {
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::vector<float> q_mean_real, q_mean_imag, q_abs_mean;  // [n_layers][n_heads][head_dim / 2]
  std::vector<float> omega, freq_scale;                     // [head_dim / 2]
  std::vector<float> q_weight_norm;                         // [n_layers]
  std::map<std::string, std::string> metadata;              // free-form provenance (model, text, tokens)

  int bands() const { return head_dim / 2; }
  int64_t index(int layer, int head, int band) const {
    return (int64_t{layer} * n_heads + head) * bands() + band;
  }
  // Mean over layers of the per-head max over bands of |E q_f| / E|q_f|, averaged over heads
  // (the reference's printout; about 0.977 on Qwen3).
  double validity() const;
};

// Error naming the file and the problem (not a statistics file, wrong shapes, non-finite values).
TriAttentionStats read_triattention_stats(const std::filesystem::path& path);
void write_triattention_stats(const std::filesystem::path& path, const TriAttentionStats& stats);
// The bytes write_triattention_stats writes (safetensors: a JSON header with the metadata, then F32 data).
std::string triattention_stats_bytes(const TriAttentionStats& stats);

// Error naming `path` and the first mismatch when `stats` were not made for `model`.
void check_stats_match(const TriAttentionStats& stats, const ModelFingerprint& model, const std::string& path);

}  // namespace kvdice::policy
