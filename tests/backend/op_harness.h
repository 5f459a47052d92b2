// Utilities of the op-parity harness (tests/backend/test_ops.cpp, after llama.cpp's test-backend-ops):
// the CPU reference and the CUDA backend side by side, backend memory with a sentinel after every
// output, step batches built on the host and uploaded to each backend, seeded bf16-exact inputs and
// normalised error. Without a GPU every case skips with the reason.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

namespace kvdice::test {

// Bytes after every allocation that no op may touch.
inline constexpr size_t kSentinelBytes = 256;
inline constexpr uint8_t kSentinelByte = 0xA7;

// The two backends of a parity case; `gpu` is null (and the case skips) without CUDA.
struct BackendPair {
  std::unique_ptr<backend::Backend> cpu;
  std::unique_ptr<backend::Backend> gpu;
  std::string skip_reason;
};

inline BackendPair make_pair() {
  BackendPair pair;
  pair.cpu = backend::make_cpu_backend(0);
#ifndef KVDICE_WITH_CUDA
  pair.skip_reason = "this build has no CUDA backend (configure with -DKVDICE_CUDA=ON)";
#else
  if (!backend::cuda_available()) {
    pair.skip_reason = "no CUDA device is visible";
  } else {
    backend::BackendOptions options;
    options.name = "cuda";
    pair.gpu = backend::make_backend(options);
  }
#endif
  return pair;
}

#define KVDICE_REQUIRE_GPU(pair) \
  if (!(pair).gpu) GTEST_SKIP() << (pair).skip_reason

// Backend memory of `bytes` followed by a sentinel region.
struct Guarded {
  backend::Backend* owner = nullptr;
  backend::Buffer buffer;
  size_t bytes = 0;

  Guarded() = default;
  Guarded(backend::Backend& b, size_t n, const std::string& what) : owner(&b), bytes(n) {
    buffer = b.alloc(n + kSentinelBytes, what);
    b.fill_zero(buffer.data(), n);
    std::vector<uint8_t> sentinel(kSentinelBytes, kSentinelByte);
    b.upload(static_cast<char*>(buffer.data()) + n, sentinel.data(), kSentinelBytes);
  }
  void* data() const { return buffer.data(); }
  bool sentinel_intact() const {
    std::vector<uint8_t> tail(kSentinelBytes);
    owner->download(tail.data(), static_cast<const char*>(buffer.data()) + bytes, kSentinelBytes);
    for (uint8_t byte : tail)
      if (byte != kSentinelByte) return false;
    return true;
  }
};

// A guarded matrix [rows, cols] of `dtype` (ld = cols).
struct Matrix {
  Guarded memory;
  backend::View view;
  Matrix() = default;
  Matrix(backend::Backend& b, DType dtype, int64_t rows, int64_t cols, const std::string& what)
      : memory(b, static_cast<size_t>(rows * cols) * dtype_size(dtype), what) {
    view.data = memory.data();
    view.dtype = dtype;
    view.rows = rows;
    view.cols = cols;
    view.ld = cols;
  }
  void upload(const std::vector<float>& host) { memory.owner->upload_matrix(view, host.data()); }
  std::vector<float> download() const {
    std::vector<float> host(static_cast<size_t>(view.rows * view.cols));
    memory.owner->download_matrix(view, host.data());
    return host;
  }
};

inline float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Seeded normal values rounded to bf16, so both backends see exactly the same inputs.
inline std::vector<float> random_values(size_t n, uint64_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_round(offset + scale * normal(rng));
  return v;
}

// ||a - b|| / ||b|| (b the reference); infinity on a shape mismatch or a non-finite value.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// A step batch on the host; upload() copies every array into guarded backend memory.
struct HostBatch {
  int n_seqs = 0, n_rows = 0, max_rows_per_seq = 0, max_pages = 0;
  std::vector<int32_t> tokens, row_seq, seq_row_begin, length, appended, page_table;
  std::vector<int32_t> budget, window, n_protected, policy_id, round, ring_row;
  std::vector<PhiloxKey> evict_key, sample_key;
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k, gen_step, forced, next_token;
  std::vector<float> forced_logprob;
  std::vector<uint8_t> forced_is_argmax;

  // Sequences with the given numbers of new rows, every other field at a neutral default.
  static HostBatch make(const std::vector<int>& rows_per_seq, int max_pages) {
    HostBatch h;
    h.n_seqs = static_cast<int>(rows_per_seq.size());
    h.max_pages = max_pages;
    h.seq_row_begin.push_back(0);
    for (int s = 0; s < h.n_seqs; ++s) {
      for (int i = 0; i < rows_per_seq[s]; ++i) {
        h.row_seq.push_back(s);
        h.tokens.push_back(0);
      }
      h.seq_row_begin.push_back(h.seq_row_begin.back() + rows_per_seq[s]);
      h.max_rows_per_seq = std::max(h.max_rows_per_seq, rows_per_seq[s]);
    }
    h.n_rows = h.seq_row_begin.back();
    const size_t n = static_cast<size_t>(h.n_seqs);
    h.length.assign(n, 0);
    h.appended.assign(n, 0);
    h.page_table.assign(n * static_cast<size_t>(max_pages), 0);
    h.budget.assign(n, 0);
    h.window.assign(n, 1);
    h.n_protected.assign(n, 0);
    h.policy_id.assign(n, 0);
    h.round.assign(n, 0);
    h.ring_row.resize(n);  // sequence s holds query ring row s
    std::iota(h.ring_row.begin(), h.ring_row.end(), 0);
    h.evict_key.assign(n, PhiloxKey{0, 0});
    h.sample_key.assign(n, PhiloxKey{0, 0});
    h.temperature.assign(n, 0.0f);
    h.top_p.assign(n, 1.0f);
    h.top_k.assign(n, 0);
    h.gen_step.assign(n, 0);
    h.forced.assign(n, -1);
    h.next_token.assign(n, -1);
    h.forced_logprob.assign(n, 0.0f);
    h.forced_is_argmax.assign(n, 0);
    return h;
  }
};

// The query ring writer's cases in one batch: a decode row, a 7-row prefill chunk with r = 4 (only its
// last 4 rows may write the ring), a row without a ring row (writes none) and a 3-row chunk; ring rows
// out of batch order (ring row 2 unused, 4 rows of 16 slots), pages shuffled.
inline HostBatch ring_writer_batch(int max_pages) {
  HostBatch h = HostBatch::make({1, 7, 2, 3}, max_pages);
  h.length = {20, 0, 5, 9};
  h.appended = {1000, 0, 5, 300};
  h.budget = {32, 16, 0, 32};
  h.window = {8, 4, 8, 16};
  h.ring_row = {3, 0, -1, 1};
  std::iota(h.page_table.begin(), h.page_table.end(), 0);
  std::shuffle(h.page_table.begin(), h.page_table.end(), std::mt19937_64(61));
  return h;
}
constexpr int kRingWriterRows = 4, kRingWriterWindow = 16;

// A HostBatch uploaded to one backend: the StepBatch of device pointers plus the guarded arrays.
struct DeviceBatch {
  backend::StepBatch batch;
  std::vector<std::unique_ptr<Guarded>> arrays;
  backend::Backend* owner = nullptr;

  template <class T>
  T* put(const std::vector<T>& host, const char* what) {
    const size_t bytes = std::max<size_t>(host.size(), 1) * sizeof(T);
    arrays.push_back(std::make_unique<Guarded>(*owner, bytes, what));
    if (!host.empty()) owner->upload(arrays.back()->data(), host.data(), host.size() * sizeof(T));
    return static_cast<T*>(arrays.back()->data());
  }
  template <class T>
  std::vector<T> get(const T* device, size_t n) const {
    std::vector<T> host(n);
    if (n > 0) owner->download(host.data(), device, n * sizeof(T));
    return host;
  }
  bool sentinels_intact() const {
    for (const auto& a : arrays)
      if (!a->sentinel_intact()) return false;
    return true;
  }

  DeviceBatch(backend::Backend& b, const HostBatch& h) : owner(&b) {
    batch.n_seqs = h.n_seqs;
    batch.n_rows = h.n_rows;
    batch.max_rows_per_seq = h.max_rows_per_seq;
    batch.max_pages = h.max_pages;
    batch.tokens = put(h.tokens, "tokens");
    batch.row_seq = put(h.row_seq, "row_seq");
    batch.seq_row_begin = put(h.seq_row_begin, "seq_row_begin");
    batch.length = put(h.length, "length");
    batch.appended = put(h.appended, "appended");
    batch.page_table = put(h.page_table, "page_table");
    batch.budget = put(h.budget, "budget");
    batch.window = put(h.window, "window");
    batch.n_protected = put(h.n_protected, "n_protected");
    batch.policy_id = put(h.policy_id, "policy_id");
    batch.round = put(h.round, "round");
    batch.ring_row = put(h.ring_row, "ring_row");
    batch.evict_key = put(h.evict_key, "evict_key");
    batch.sample_key = put(h.sample_key, "sample_key");
    batch.temperature = put(h.temperature, "temperature");
    batch.top_p = put(h.top_p, "top_p");
    batch.top_k = put(h.top_k, "top_k");
    batch.gen_step = put(h.gen_step, "gen_step");
    batch.forced = put(h.forced, "forced");
    batch.next_token = put(h.next_token, "next_token");
    batch.forced_logprob = put(h.forced_logprob, "forced_logprob");
    batch.forced_is_argmax = put(h.forced_is_argmax, "forced_is_argmax");
  }
};

// One KV layer in guarded backend memory, [n_pages][n_kv][page_slots][head_dim] in the backend's
// KV dtype plus positions; filled from fp32 host arrays (bf16-exact values).
struct KvLayerMemory {
  Matrix keys, values;
  Guarded positions;
  backend::KvLayer layer;
  KvLayerMemory(backend::Backend& b, int n_pages, int n_kv, int page_slots, int head_dim, int layer_index)
      : keys(b, b.kv_dtype(), int64_t{n_pages} * n_kv * page_slots, head_dim, "keys"),
        values(b, b.kv_dtype(), int64_t{n_pages} * n_kv * page_slots, head_dim, "values"),
        positions(b, sizeof(int32_t) * static_cast<size_t>(n_pages) * n_kv * page_slots, "positions") {
    layer.keys = keys.view.data;
    layer.values = values.view.data;
    layer.positions = static_cast<int32_t*>(positions.data());
    layer.dtype = b.kv_dtype();
    layer.n_kv_heads = n_kv;
    layer.head_dim = head_dim;
    layer.page_slots = page_slots;
    layer.layer = layer_index;
  }
  void upload(const std::vector<float>& k, const std::vector<float>& v, const std::vector<int32_t>& pos) {
    keys.upload(k);
    values.upload(v);
    positions.owner->upload(positions.data(), pos.data(), pos.size() * sizeof(int32_t));
  }
  std::vector<int32_t> download_positions() const {
    std::vector<int32_t> host(positions.bytes / sizeof(int32_t));
    positions.owner->download(host.data(), positions.data(), positions.bytes);
    return host;
  }
  bool sentinels_intact() const {
    return keys.memory.sentinel_intact() && values.memory.sentinel_intact() && positions.sentinel_intact();
  }
};

}  // namespace kvdice::test
