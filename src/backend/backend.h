// Backend: the fused ops one decode step is made of. The CPU backend (cpu/) is the fp32 reference;
// the CUDA backend (a later issue) implements the same ops in bf16 and is checked against it.
// Pointers are host pointers for the CPU backend. Matrices are row-major; weights are [out, in].
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace kvdice::backend {

// One attention problem: `n_q` query rows of one query head against `n_kv` key/value rows.
struct AttentionShape {
  int head_dim = 0;
  float scale = 0.0f;  // usually 1 / sqrt(head_dim)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // out[i, :] = table[ids[i], :]
  virtual void embed(const float* table, int dim, std::span<const int> ids, float* out) = 0;
  // y = x / rms(x) * w, per row of `dim`.
  virtual void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps) = 0;
  // y[rows, out] = x[rows, in] · W[out, in]^T (+ bias[out] when non-null).
  virtual void matmul(const float* x, const float* w, const float* bias, float* y, int rows, int in,
                      int out) = 0;
  // x += y, n elements.
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // out[r, i] = silu(gate[r, i]) * up[r, i]; gate_up is [rows, 2 * n] (gate first) when fused.
  virtual void silu_mul(const float* gate, const float* up, float* out, int rows, int n) = 0;
  // Rotate-half RoPE in place on `n_heads` heads of one token at absolute `position`, using the
  // precomputed inverse frequencies (head_dim / 2 of them; rotary dims beyond are left untouched).
  virtual void rope(float* x, int n_heads, int head_dim, int rotary_dim, const float* inv_freq,
                    int64_t position) = 0;
  // Causal attention of `n_q` new queries (at positions kv_len - n_q .. kv_len - 1 of the slot
  // order) over `n_kv` keys; query row i sees keys [0, n_kv - n_q + i]. q/out: [n_q, head_dim].
  // keys/values: [n_kv, head_dim]. Decode is n_q = 1 over all resident slots.
  virtual void attention(const float* q, const float* keys, const float* values, float* out, int n_q,
                         int n_kv, const AttentionShape& shape) = 0;
};

std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace kvdice::backend
