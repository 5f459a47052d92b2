// The windowed attention score shared by SnapKV, VaSE and R-KV (docs/reference.md §2): for each query head
// of the KV head's group and each of its last r post-RoPE queries, softmax over the candidates of
// q·k / (sqrt(D) · temperature); the mean over the queries, optionally smoothed by a 1-D average pool
// along the candidates in age order (kernel `pool`, zero padding pool / 2, stride 1, divided by the
// kernel as torch's avg_pool1d does), then the mean over the group.
//
// Two precisions, the policies' option `precision` (docs/policies.md, "Precision and near-ties"):
//   fp64 (the default): computed in double from the queries (bf16 values, as the query ring holds them,
//     handed over as fp32) and the keys; the CUDA twin reproduces the logits bit for bit, so keep-sets
//     equal the CPU's up to ~1e-15 near-ties.
//   fp32: queries and keys rounded to bf16 (a no-op for the ring's queries), each logit the fp32 sum
//     of their products (each exact in fp32) over the dimensions in order, times the fp32 scale;
//     softmax statistics, weights and the per-query-head means fp32 (exp(l - max), taken as 0 below
//     2^-126, over the denominator, summed over the queries newest first, then divided by the query
//     count); the pooling and the group mean add those means in double. The CUDA twin computes the
//     logits on tensor cores and sums the same terms in another order, so the scores differ by a few
//     fp32 roundings and keep-sets may differ at near-ties within the stated bound.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "policy/eviction_policy.h"
#include "policy/policy_options.h"

namespace kvdice::policy {

enum class WindowPrecision { Fp64, Fp32 };

// One score per candidate slot [0, n_candidates); pool = 1 means no smoothing (pool must be odd).
std::vector<double> windowed_attention(const SelectionInput& input, int pool, double temperature,
                                       WindowPrecision precision = WindowPrecision::Fp64);

// The option `precision=fp64|fp32` (default fp64); Error naming the policy and the value otherwise.
WindowPrecision read_window_precision(PolicyOptions& options, std::string_view policy);
// What the policy's options() adds: ",precision=fp32", or nothing for the default (so the description
// of every fp64 run stays what it was before the option existed).
std::string window_precision_option(WindowPrecision precision);

// The fp32 scale of the fp32 window logits, 1 / (sqrt(D) · temperature) in double rounded once (both
// twins compute it so).
float window_logit_scale(int head_dim, double temperature);

}  // namespace kvdice::policy
