// The fp32 reference backend: readable loops (OpenMP over rows/heads), OpenBLAS for the GEMMs.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace kvdice::backend {
namespace {

class CpuBackend final : public Backend {
 public:
  // One thread pool only: OpenBLAS runs single-threaded inside our OpenMP slices, because two
  // pools on the same cores spin against each other (measured: 2 threads ran slower than 1).
  explicit CpuBackend(int threads) : threads_(threads > 0 ? threads : omp_get_max_threads()) {
    openblas_set_num_threads(1);
  }

  std::string name() const override { return fmt::format("cpu (fp32, {} threads)", threads_); }

  void embed(const float* table, int dim, std::span<const int> ids, float* out) override {
    for (size_t i = 0; i < ids.size(); ++i)
      std::copy_n(table + static_cast<int64_t>(ids[i]) * dim, dim, out + i * dim);
  }

  void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps) override {
#pragma omp parallel for num_threads(threads_) if (rows > 1)
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + static_cast<int64_t>(r) * dim;
      float* yr = y + static_cast<int64_t>(r) * dim;
      double sum = 0.0;
      for (int i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
      float inv = 1.0f / std::sqrt(static_cast<float>(sum / dim) + eps);
      for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
    }
  }

  void matmul(const float* x, const float* w, const float* bias, float* y, int rows, int in,
              int out) override {
    // Each thread computes a contiguous slice of output features (rows of W).
    const int slices = std::min(threads_, std::max(1, out / 64));
#pragma omp parallel for num_threads(slices) schedule(static)
    for (int t = 0; t < slices; ++t) {
      const int begin = static_cast<int>(int64_t(out) * t / slices),
                end = static_cast<int>(int64_t(out) * (t + 1) / slices);
      const float* w_slice = w + int64_t(begin) * in;
      if (rows == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, end - begin, in, 1.0f, w_slice, in, x, 1, 0.0f, y + begin,
                    1);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, end - begin, in, 1.0f, x, in, w_slice, in,
                    0.0f, y + begin, out);
      }
    }
    if (bias != nullptr) {
      for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) y[static_cast<int64_t>(r) * out + o] += bias[o];
    }
  }

  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void silu_mul(const float* gate, const float* up, float* out, int rows, int n) override {
    int64_t total = static_cast<int64_t>(rows) * n;
#pragma omp parallel for num_threads(threads_) if (total > 65536)
    for (int64_t i = 0; i < total; ++i) {
      float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }

  void rope(float* x, int n_heads, int head_dim, int rotary_dim, const float* inv_freq,
            int64_t position) override {
    int half = rotary_dim / 2;
    for (int i = 0; i < half; ++i) {
      // Angles in double so large absolute positions keep fp32-level accuracy like HF's fp32 path.
      double angle = static_cast<double>(position) * static_cast<double>(inv_freq[i]);
      float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<int64_t>(h) * head_dim;
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }

  void attention(const float* q, const float* keys, const float* values, float* out, int n_q, int n_kv,
                 const AttentionShape& shape) override {
    const int d = shape.head_dim;
    std::vector<float> scores(n_kv);
    for (int i = 0; i < n_q; ++i) {
      const float* qi = q + static_cast<int64_t>(i) * d;
      int visible = n_kv - n_q + i + 1;
      float max_score = -INFINITY;
      for (int j = 0; j < visible; ++j) {
        const float* kj = keys + static_cast<int64_t>(j) * d;
        float dot = 0.0f;
        for (int c = 0; c < d; ++c) dot += qi[c] * kj[c];
        scores[j] = dot * shape.scale;
        max_score = std::max(max_score, scores[j]);
      }
      double denom = 0.0;
      for (int j = 0; j < visible; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        denom += scores[j];
      }
      float* oi = out + static_cast<int64_t>(i) * d;
      std::fill_n(oi, d, 0.0f);
      float inv = static_cast<float>(1.0 / denom);
      for (int j = 0; j < visible; ++j) {
        const float* vj = values + static_cast<int64_t>(j) * d;
        float p = scores[j] * inv;
        for (int c = 0; c < d; ++c) oi[c] += p * vj[c];
      }
    }
  }

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace kvdice::backend
