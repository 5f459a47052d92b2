// Op parity of the CUDA backend against the CPU reference, case tables per op (test-backend-ops
// style): identical bf16-exact inputs on both backends, float ops by normalised error with the
// tolerance in the table, integer results bit-exact, and a sentinel after every output checked
// untouched. Skips (with the reason) without a GPU or in a build without CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/op_harness.h"
#ifdef KVDICE_WITH_CUDA
#include "backend/cuda/cuda_kernels.h"
#endif
#include "backend/sampling_rule.h"
#include "core/error.h"
#include "policy/cuda_selection.h"
#include "policy/eviction_policy.h"

namespace kvdice::test {
namespace {

using backend::Backend;

// Pages for sequences of the given slot capacities, shuffled so that no sequence's pages are contiguous.
std::vector<int32_t> shuffled_page_table(int n_seqs, int max_pages, uint64_t seed) {
  std::vector<int32_t> pages(static_cast<size_t>(n_seqs * max_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937_64(seed));
  return pages;
}

// ---- copy --------------------------------------------------------------------------------------

// Backend::copy on every backend this build has (the CPU always): an unaligned range lands where it
// should and nothing around it moves, and it runs in order with the ops before and after it (a copy
// of the copy sees the first one's bytes; a fill after it overwrites them).
TEST(BackendCopy, MovesBytesInOrderWithTheOtherOps) {
  BackendPair pair = make_pair();
  const size_t n = (size_t{1} << 20) + 37, at = 3, len = n - 11;
  std::vector<unsigned char> pattern(n);
  for (size_t i = 0; i < n; ++i) pattern[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  std::vector<unsigned char> want_b(n, 0), want_c(n, 0);
  std::copy(pattern.begin(), pattern.begin() + static_cast<std::ptrdiff_t>(len), want_b.begin() + at);
  std::copy(want_b.begin(), want_b.end(), want_c.begin());
  std::fill(want_b.begin(), want_b.begin() + 8, 0);
  for (Backend* backend : {pair.cpu.get(), pair.gpu.get()}) {
    if (backend == nullptr) continue;
    SCOPED_TRACE(backend->name());
    backend::Buffer a = backend->alloc(n, "a"), b = backend->alloc(n, "b"), c = backend->alloc(n, "c");
    backend->upload(a.data(), pattern.data(), n);
    backend->fill_zero(b.data(), n);
    backend->copy(static_cast<unsigned char*>(b.data()) + at, a.data(), len);
    backend->copy(c.data(), b.data(), n);
    backend->fill_zero(b.data(), 8);
    std::vector<unsigned char> got_b(n), got_c(n);
    backend->download(got_b.data(), b.data(), n);
    backend->download(got_c.data(), c.data(), n);
    EXPECT_EQ(got_b, want_b);
    EXPECT_EQ(got_c, want_c);
  }
}

// ---- embed, rmsnorm, matmul, silu_mul, gather, advance ------------------------------------------

TEST(CudaOps, Embed) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  struct Case {
    int vocab, hidden, rows;
  };
  for (const Case c : {Case{1000, 64, 5}, Case{4096, 2560, 9}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << c.vocab << " hidden " << c.hidden);
    const auto table = random_values(size_t(c.vocab) * c.hidden, 11);
    HostBatch h = HostBatch::make(std::vector<int>(c.rows, 1), 1);
    for (int r = 0; r < c.rows; ++r) h.tokens[r] = (r * 7919 + 3) % c.vocab;
    std::vector<float> out[2];
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      Matrix t(*b, b->weight_dtype(), c.vocab, c.hidden, "table");
      t.upload(table);
      Matrix x(*b, DType::F32, c.rows, c.hidden, "x");
      DeviceBatch d(*b, h);
      b->embed(d.batch, t.view, x.view);
      out[i++] = x.download();
      EXPECT_TRUE(x.memory.sentinel_intact());
    }
    EXPECT_EQ(out[0], out[1]);  // bf16 table values are exact in fp32
  }
}

TEST(CudaOps, RmsNorm) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  struct Case {
    int rows, cols;
    DType out;
    double tol;
  };
  // Row-in-registers fast path (cols % 4 == 0, up to 8192) at 1..256 rows, and the generic fallback
  // (odd or very wide rows).
  for (const Case c :
       {Case{3, 64, DType::F32, 1e-5}, Case{17, 2560, DType::F32, 1e-5}, Case{17, 2560, DType::BF16, 6e-3},
        Case{128, 1024, DType::BF16, 6e-3}, Case{1, 2560, DType::BF16, 6e-3}, Case{1, 5120, DType::F32, 1e-5},
        Case{256, 2560, DType::BF16, 6e-3}, Case{4, 100, DType::F32, 1e-5}, Case{3, 1001, DType::F32, 1e-5},
        Case{2, 10240, DType::BF16, 6e-3}}) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.cols << " out " << dtype_name(c.out));
    const auto x_host = random_values(size_t(c.rows) * c.cols, 21, 3.0f);
    const auto w_host = random_values(size_t(c.cols), 22, 0.5f, 1.0f);
    std::vector<float> out[2];
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      Matrix x(*b, DType::F32, c.rows, c.cols, "x"), w(*b, DType::F32, 1, c.cols, "w");
      Matrix y(*b, b->is_cpu() ? DType::F32 : c.out, c.rows, c.cols, "y");
      x.upload(x_host);
      w.upload(w_host);
      b->rmsnorm(x.view, w.view, y.view, 1e-6f);
      out[i++] = y.download();
      EXPECT_TRUE(y.memory.sentinel_intact());
    }
    EXPECT_LE(relative_error(out[1], out[0]), c.tol);
  }
}

TEST(CudaOps, Matmul) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  struct Case {
    const char* name;
    int rows, in, out;
    bool bias, accumulate;
    double tol;
  };
  const Case cases[] = {
      {"small+bias", 1, 64, 96, true, false, 1e-5},
      {"small accumulate+bias", 6, 64, 32, true, true, 1e-5},
      // Rows 1..8 take gemv.cu, the rest (and odd `in`) cuBLASLt.
      {"decode batch 1 o_proj (residual)", 1, 4096, 2560, false, true, 1e-4},
      {"batch 1 qkv", 1, 2560, 6144, false, false, 1e-4},
      {"batch 1 down (residual)", 1, 9728, 2560, false, true, 1e-4},
      {"batch 1 logits", 1, 2560, 151936, false, false, 1e-4},
      {"batch 1, fewer lines than warps, bias", 1, 256, 97, true, false, 1e-5},
      {"batch 1, rows cut between warps", 1, 768, 1001, false, true, 1e-4},
      {"decode batch 8 gate_up", 8, 2560, 19456, false, false, 1e-4},
      {"batch 9 (cuBLASLt)", 9, 2560, 512, false, true, 1e-4},
      {"odd in (cuBLASLt)", 2, 36, 40, true, false, 1e-5},
      {"qwen3-4b qkv", 7, 2560, 6144, false, false, 1e-4},
      {"qwen3-4b gate_up", 5, 2560, 19456, false, false, 1e-4},
      {"qwen3-4b down (residual)", 5, 9728, 2560, false, true, 1e-4},
      {"qwen3-4b o_proj batch 128", 128, 4096, 2560, false, true, 1e-4},
      {"qwen3-4b logits", 3, 2560, 151936, false, false, 1e-4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto x_host = random_values(size_t(c.rows) * c.in, 31);
    const auto w_host = random_values(size_t(c.out) * c.in, 32, 0.05f);
    const auto b_host = random_values(size_t(c.out), 33);
    const auto y0 = random_values(size_t(c.rows) * c.out, 34);
    std::vector<float> out[2];
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      Matrix x(*b, b->activation_dtype(), c.rows, c.in, "x"), w(*b, b->weight_dtype(), c.out, c.in, "w");
      Matrix bias(*b, DType::F32, 1, c.out, "bias"), y(*b, DType::F32, c.rows, c.out, "y");
      x.upload(x_host);
      w.upload(w_host);
      bias.upload(b_host);
      y.upload(y0);
      backend::Weight weight{w.view, c.bias ? bias.view : backend::View{}};
      b->matmul(x.view, weight, y.view, c.accumulate);
      out[i++] = y.download();
      EXPECT_TRUE(y.memory.sentinel_intact());
    }
    EXPECT_LE(relative_error(out[1], out[0]), c.tol);
  }
}

// rmsnorm_matmul's one-row CUDA form (gemv_norm.cu) against the composition on the GPU (the normed row is
// bit-identical, the matmul's summation order differs) and against the CPU. A weight above 64 MiB, two
// rows and a norm weight off 16-byte alignment take the composition.
TEST(CudaOps, RmsNormMatmulEqualsItsComposition) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  enum Form { kOneWave, kComposition };
  struct Case {
    const char* name;
    int rows, in, out;
    bool bias;
    Form form;
    bool misaligned_norm = false;
  };
  const Case cases[] = {
      {"qwen3-4b qkv", 1, 2560, 6144, false, kOneWave},
      {"llama hidden, bias", 1, 4096, 300, true, kOneWave},
      {"widest row, fewer lines than warps", 1, 8192, 3, false, kOneWave},
      {"rows cut between warps", 1, 768, 1001, false, kOneWave},
      {"gate_up", 1, 2560, 19456, false, kComposition},
      {"two rows", 2, 2560, 512, false, kComposition},
      {"norm weight off 16-byte alignment", 1, 2560, 512, false, kComposition, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto x_host = random_values(size_t(c.rows) * c.in, 51, 3.0f);
    const auto norm_host = random_values(size_t(c.in), 52, 0.5f, 1.0f);
    const auto w_host = random_values(size_t(c.out) * c.in, 53, 0.05f);
    const auto b_host = random_values(size_t(c.out), 54);
    std::vector<float> fused[2], composed;
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      Matrix x(*b, DType::F32, c.rows, c.in, "x"), norm(*b, DType::F32, 1, c.in + 1, "norm");
      Matrix h(*b, b->activation_dtype(), c.rows, c.in, "normed row");
      Matrix w(*b, b->weight_dtype(), c.out, c.in, "w"), bias(*b, DType::F32, 1, c.out, "bias");
      Matrix y(*b, DType::F32, c.rows, c.out, "y");
      x.upload(x_host);
      std::vector<float> norm_padded(norm_host);
      norm_padded.insert(c.misaligned_norm ? norm_padded.begin() : norm_padded.end(), 0.0f);
      norm.upload(norm_padded);
      backend::View norm_view = norm.view;  // the first c.in floats, or (misaligned) the last
      norm_view.data = static_cast<float*>(norm_view.data) + (c.misaligned_norm ? 1 : 0);
      norm_view.cols = norm_view.ld = c.in;
      w.upload(w_host);
      bias.upload(b_host);
      const backend::Weight weight{w.view, c.bias ? bias.view : backend::View{}};
      b->rmsnorm_matmul(x.view, norm_view, 1e-6f, h.view, weight, y.view);
      fused[i] = y.download();
      if (!b->is_cpu()) {
        b->rmsnorm(x.view, norm_view, h.view, 1e-6f);
        b->matmul(h.view, weight, y.view, false);
        composed = y.download();
      }
      EXPECT_TRUE(y.memory.sentinel_intact() && h.memory.sentinel_intact());
      ++i;
    }
    EXPECT_LE(relative_error(fused[1], composed), c.form == kComposition ? 0.0 : 1e-5);
    EXPECT_LE(relative_error(fused[1], fused[0]), 3e-3);  // the CPU keeps the row in fp32
  }
}

TEST(CudaOps, SiluMulGatherAdvance) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  const int rows = 6, n = 9728;
  const auto gu = random_values(size_t(rows) * 2 * n, 41, 2.0f);
  HostBatch h = HostBatch::make({2, 1, 3}, 1);
  h.length = {5, 0, 9};
  h.appended = {50, 0, 90};
  std::vector<float> silu[2], gathered[2];
  std::vector<int32_t> length[2], appended[2];
  int i = 0;
  for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
    Matrix g(*b, DType::F32, rows, 2 * n, "gate_up"), o(*b, b->activation_dtype(), rows, n, "out");
    Matrix last(*b, DType::F32, 3, 2 * n, "last rows");
    g.upload(gu);
    DeviceBatch d(*b, h);
    b->silu_mul(g.view, o.view);
    b->gather_last_rows(d.batch, g.view, last.view);
    b->advance(d.batch);
    silu[i] = o.download();
    gathered[i] = last.download();
    length[i] = d.get(d.batch.length, 3);
    appended[i] = d.get(d.batch.appended, 3);
    EXPECT_TRUE(o.memory.sentinel_intact() && last.memory.sentinel_intact() && d.sentinels_intact());
    ++i;
  }
  EXPECT_LE(relative_error(silu[1], silu[0]), 5e-3);
  EXPECT_EQ(gathered[0], gathered[1]);
  EXPECT_EQ(length[0], length[1]);
  EXPECT_EQ(appended[0], appended[1]);
  EXPECT_EQ(length[1], (std::vector<int32_t>{7, 1, 12}));
}

// The decode step publishes its sampled tokens from inside its graph: store_to_host must write the host
// slot when the recording replays (not when it is recorded), with the device words of that moment, and
// nothing past the words asked for.
TEST(CudaOps, StoreToHostWritesTheSlotWhenTheGraphReplays) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  const int n = 300;  // more than one CTA of the store kernel
  std::vector<int32_t> first(n), second(n);
  for (int i = 0; i < n; ++i) first[i] = 7 * i - 1000, second[i] = 1 << 20 | i;
  for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
    backend::Buffer words = b->alloc(sizeof(int32_t) * n, "words");
    backend::Buffer host = b->alloc_host(sizeof(int32_t) * (2 * n + 1), "host slots");
    int32_t* slots = static_cast<int32_t*>(host.data());
    std::fill(slots, slots + 2 * n + 1, -7);
    const auto* device = static_cast<const int32_t*>(words.data());
    b->upload(words.data(), first.data(), sizeof(int32_t) * n);
    b->store_to_host(slots, device, n);  // eager, into slot 0
    b->wait(b->mark());
    EXPECT_EQ(std::vector<int32_t>(slots, slots + n), first);
    const int owner = 0;
    const bool recorded = b->begin_capture();
    if (recorded) {
      b->store_to_host(slots + n, device, n);  // slot 1, recorded only
      b->end_capture(&owner, 1);
      b->synchronize();
      EXPECT_EQ(slots[n], -7) << "a recorded op ran at recording";
    }
    b->upload(words.data(), second.data(), sizeof(int32_t) * n);
    if (recorded) {
      ASSERT_TRUE(b->replay(&owner, 1));
    } else {
      b->store_to_host(slots + n, device, n);
    }
    b->wait(b->mark());
    EXPECT_EQ(std::vector<int32_t>(slots + n, slots + 2 * n), second);
    EXPECT_EQ(std::vector<int32_t>(slots, slots + n), first);  // slot 0 untouched
    EXPECT_EQ(slots[2 * n], -7);                               // nothing past the words
    b->drop_graphs(&owner);
  }
}

TEST(CudaOps, SiluMulShapes) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  struct Case {
    int rows, n;
    DType out;
    double tol;
  };
  // The grid-stride vector path (bf16 and f32 outputs, 1 and 128 rows) and the per-row fallback (odd n).
  for (const Case c :
       {Case{1, 9728, DType::BF16, 5e-3}, Case{128, 9728, DType::BF16, 5e-3}, Case{5, 36, DType::F32, 1e-6},
        Case{3, 1001, DType::BF16, 5e-3}, Case{2, 7, DType::F32, 1e-6}}) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.n << " out " << dtype_name(c.out));
    const auto gu = random_values(size_t(c.rows) * 2 * c.n, 42, 2.0f);
    std::vector<float> out[2];
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      Matrix g(*b, DType::F32, c.rows, 2 * c.n, "gate_up");
      Matrix o(*b, b->is_cpu() ? DType::F32 : c.out, c.rows, c.n, "out");
      g.upload(gu);
      b->silu_mul(g.view, o.view);
      out[i++] = o.download();
      EXPECT_TRUE(o.memory.sentinel_intact());
    }
    EXPECT_LE(relative_error(out[1], out[0]), c.tol);
  }
}

// ---- qk_norm_rope_append --------------------------------------------------------------------------

struct RopeCase {
  const char* name;
  int n_heads, n_kv, head_dim, rotary_dim;
  bool norms;
  int base_position;
};

// A RoPE case's per-head norms (Qwen3) and rotation table on one backend, the same on every backend.
struct RopeTables {
  Matrix q_norm, k_norm, inv_freq;
  backend::Rope rope;
  RopeTables(Backend& b, int head_dim, int rotary_dim)
      : q_norm(b, DType::F32, 1, head_dim, "q_norm"),
        k_norm(b, DType::F32, 1, head_dim, "k_norm"),
        inv_freq(b, DType::F32, 1, rotary_dim / 2, "inv_freq") {
    q_norm.upload(random_values(size_t(head_dim), 53, 0.3f, 1.0f));
    k_norm.upload(random_values(size_t(head_dim), 54, 0.3f, 1.0f));
    std::vector<float> freq(size_t(rotary_dim / 2));
    for (int i = 0; i < rotary_dim / 2; ++i)
      freq[i] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / rotary_dim));
    inv_freq.upload(freq);
    rope = {inv_freq.view.as<const float>(), rotary_dim};
  }
  // The norms, or none (models without q/k norms).
  backend::View q(bool norms) const { return norms ? q_norm.view : backend::View{}; }
  backend::View k(bool norms) const { return norms ? k_norm.view : backend::View{}; }
};

TEST(CudaOps, QkNormRopeAppend) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  const RopeCase cases[] = {
      {"fixture hd32", 4, 2, 32, 32, false, 0},
      {"qwen2.5-0.5b", 14, 2, 64, 64, false, 5000},
      {"qwen3-4b", 32, 8, 128, 128, true, 100000},
      {"hd16 norms", 2, 1, 16, 16, true, 7},
      {"hd256 partial rotary", 8, 4, 256, 128, true, 123},
  };
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int page_slots = 16, max_pages = 4;
    HostBatch h = HostBatch::make({1, 4, 2}, max_pages);
    h.length = {5, 0, 30};
    h.appended = {c.base_position + 5, c.base_position, c.base_position + 900};
    h.page_table = shuffled_page_table(h.n_seqs, max_pages, 51);
    const int qkv_cols = (c.n_heads + 2 * c.n_kv) * c.head_dim;
    const auto qkv_host = random_values(size_t(h.n_rows) * qkv_cols, 52, 2.0f);
    const int n_pages = h.n_seqs * max_pages;
    std::vector<float> q_out[2], k_out[2], v_out[2];
    std::vector<int32_t> pos_out[2];
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      Matrix qkv(*b, DType::F32, h.n_rows, qkv_cols, "qkv"),
          q(*b, b->activation_dtype(), h.n_rows, int64_t{c.n_heads} * c.head_dim, "q");
      qkv.upload(qkv_host);
      const RopeTables tables(*b, c.head_dim, c.rotary_dim);
      KvLayerMemory kv(*b, n_pages, c.n_kv, page_slots, c.head_dim, 0);
      DeviceBatch d(*b, h);
      b->qk_norm_rope_append(d.batch, qkv.view, tables.q(c.norms), tables.k(c.norms), 1e-6f, tables.rope,
                             kv.layer, q.view, c.n_heads);
      q_out[i] = q.download();
      k_out[i] = kv.keys.download();
      v_out[i] = kv.values.download();
      pos_out[i] = kv.download_positions();
      EXPECT_TRUE(q.memory.sentinel_intact() && kv.sentinels_intact() && d.sentinels_intact());
      ++i;
    }
    EXPECT_LE(relative_error(q_out[1], q_out[0]), 6e-3);
    EXPECT_LE(relative_error(k_out[1], k_out[0]), 6e-3);
    EXPECT_EQ(v_out[1], v_out[0]);  // v is copied: bf16-exact inputs stay exact
    EXPECT_EQ(pos_out[1], pos_out[0]);
  }
}

// ---- attention ------------------------------------------------------------------------------------

struct AttentionCase {
  const char* name;
  int n_heads, n_kv, head_dim;
  std::vector<int> rows, lengths;
  int extra_pages = 0;  // page-table columns beyond the longest sequence (capacity >> resident length)
};

TEST(CudaOps, Attention) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  const AttentionCase cases[] = {
      {"decode fixture hd32 g2", 4, 2, 32, {1, 1, 1}, {0, 17, 300}},
      {"decode qwen2.5-0.5b g7 long (split)", 14, 2, 64, {1, 1}, {1000, 5000}},
      {"decode qwen3-4b", 32, 8, 128, {1, 1, 1, 1}, {10, 2047, 4000, 64}},
      {"decode hd16 mha", 16, 16, 16, {1, 1}, {33, 5}},
      {"decode hd256 g4", 8, 2, 256, {1, 1}, {100, 700}},
      {"prefill qwen3-4b", 32, 8, 128, {37, 5}, {0, 100}},
      {"prefill qwen2.5-0.5b", 14, 2, 64, {70}, {0}},
      // Phi-4: 10 KV heads (every other case has at most 8).
      {"decode phi-4", 40, 10, 128, {1, 1, 1}, {10, 1500, 4000}},
      {"prefill phi-4", 40, 10, 128, {37, 5}, {0, 100}},
      {"prefill mixed hd16", 4, 4, 16, {20, 1}, {3, 50}},
      // Split-KV: the split count follows the capacity, the split ranges each sequence's actual length.
      {"decode qwen3-4b batch 1 long (split)", 32, 8, 128, {1}, {2111}},
      {"decode qwen3-4b batch 1 big capacity", 32, 8, 128, {1}, {2111}, 600},
      {"decode qwen3-4b batch 1 short, big capacity", 32, 8, 128, {1}, {20}, 600},
      // 511 and 512 visible slots run as one split (the output written directly), 513 and 514 split.
      {"decode qwen3-4b around the single-split edge", 32, 8, 128, {1, 1, 1, 1}, {510, 511, 512, 513}, 600},
      {"decode qwen3-4b batch 1 odd length", 32, 8, 128, {1}, {9001}},
      // Up to 8 splits run as one thread block cluster and merge in shared memory. A capacity of 1,008
      // slots gives 4 splits; 601 visible slots (5 units of 128) fill 3, so the last CTA is empty.
      {"decode qwen3-4b batch 1, splits as one cluster", 32, 8, 128, {1}, {1000}},
      {"decode qwen3-4b batch 1, a cluster with an empty split", 32, 8, 128, {1}, {600}, 25},
      {"decode hd64 g7 batch 3 mixed, big capacity", 14, 2, 64, {1, 1, 1}, {0, 777, 3000}, 300},
      {"decode qwen3-4b batch 128 short", 32, 8, 128, std::vector<int>(128, 1), {}},
      {"decode qwen3-4b batch 16 varied", 32, 8, 128, std::vector<int>(16, 1), {}, 16},
  };
  for (AttentionCase c : cases) {
    SCOPED_TRACE(c.name);
    if (c.lengths.empty()) {  // seeded lengths: 0..40 slots (batch 128) or up to 1500
      std::mt19937_64 rng(c.rows.size());
      const int most = c.rows.size() >= 128 ? 40 : 1500;
      for (size_t s = 0; s < c.rows.size(); ++s) c.lengths.push_back(static_cast<int>(rng() % (most + 1)));
    }
    const int page_slots = 16;
    int max_slots = 0;
    for (size_t s = 0; s < c.rows.size(); ++s) max_slots = std::max(max_slots, c.lengths[s] + c.rows[s]);
    const int max_pages = (max_slots + page_slots - 1) / page_slots + c.extra_pages;
    HostBatch h = HostBatch::make(c.rows, max_pages);
    for (size_t s = 0; s < c.rows.size(); ++s) {
      h.length[s] = c.lengths[s];
      h.appended[s] = c.lengths[s];
    }
    h.page_table = shuffled_page_table(h.n_seqs, max_pages, 61);
    const int n_pages = h.n_seqs * max_pages;
    const size_t pool = size_t(n_pages) * c.n_kv * page_slots * c.head_dim;
    const auto k_host = random_values(pool, 62);
    auto v_host = random_values(pool, 63);
    // Each sequence's first and last visible slots carry values 50 times the others', so a range that
    // drops either one (a split's or the single split's end) moves the output well past the tolerance;
    // one ordinary slot of 512 moved it ~0.2 %, inside the bf16 noise.
    for (size_t s = 0; s < c.rows.size(); ++s) {
      const int visible = c.lengths[s] + c.rows[s];
      for (const int slot : visible > 1 ? std::vector<int>{0, visible - 1} : std::vector<int>{0}) {
        const size_t page = static_cast<size_t>(h.page_table[s * size_t(max_pages) + slot / page_slots]);
        for (int g = 0; g < c.n_kv; ++g) {
          float* row = v_host.data() + ((page * c.n_kv + g) * page_slots + slot % page_slots) * c.head_dim;
          for (int e = 0; e < c.head_dim; ++e) row[e] *= 50.0f;
        }
      }
    }
    const std::vector<int32_t> pos_host(pool / c.head_dim, 0);
    const auto q_host = random_values(size_t(h.n_rows) * c.n_heads * c.head_dim, 64, 2.0f);
    std::vector<float> out[2];
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      KvLayerMemory kv(*b, n_pages, c.n_kv, page_slots, c.head_dim, 0);
      kv.upload(k_host, v_host, pos_host);
      Matrix q(*b, b->activation_dtype(), h.n_rows, int64_t{c.n_heads} * c.head_dim, "q");
      Matrix o(*b, b->activation_dtype(), h.n_rows, int64_t{c.n_heads} * c.head_dim, "out");
      q.upload(q_host);
      DeviceBatch d(*b, h);
      b->attention(d.batch, q.view, kv.layer, o.view, c.n_heads, 1.0f / std::sqrt(float(c.head_dim)));
      out[i++] = o.download();
      EXPECT_TRUE(o.memory.sentinel_intact() && kv.sentinels_intact());
    }
    EXPECT_LE(relative_error(out[1], out[0]), 1e-2);
  }
}

// ---- fused ops: each equals the ops it replaces on the same backend, bit for bit ----------------

// The composed form of a fused op on the same backend is the base class's default: `b.Backend::op`.

// The launch plan is host arithmetic: it runs wherever the CUDA backend is built, GPU or not.
TEST(CudaAttentionPlan, WarpsFollowTheGridAndSplitsTheCapacity) {
#ifndef KVDICE_WITH_CUDA
  GTEST_SKIP() << "this build has no CUDA backend (configure with -DKVDICE_CUDA=ON)";
#else
  backend::KvLayer kv;
  kv.n_kv_heads = 8;
  kv.page_slots = 16;
  const auto plan = [&](int n_seqs, int max_rows_per_seq, int max_pages, int sms) {
    backend::StepBatch b;
    b.n_seqs = n_seqs;
    b.n_rows = n_seqs * max_rows_per_seq;
    b.max_rows_per_seq = max_rows_per_seq;
    b.max_pages = max_pages;
    return backend::cuda::attention_plan(b, kv, sms);
  };
  // Batch 1 on an H200 (132 SMs): 8 CTAs, eight warps each; 2 x 132 / 8 = 33 splits wanted, capped by
  // the capacity at one split per 256 slots (128 pages = 2,048 slots: 8).
  auto p = plan(1, 1, 128, 132);
  EXPECT_TRUE(p.wide);
  EXPECT_EQ(p.n_splits, 8);
  // Exactly as many (sequence, KV head) pairs as SMs: still eight warps; one more sequence: four.
  EXPECT_TRUE(plan(33, 1, 128, 264).wide);
  EXPECT_FALSE(plan(34, 1, 128, 264).wide);
  // Batch 128: 1,024 CTAs, four warps, one split (2 x 132 / 1024 rounds up to 1).
  p = plan(128, 1, 128, 132);
  EXPECT_FALSE(p.wide);
  EXPECT_EQ(p.n_splits, 1);
  // A prefill step: one split, and the decode kernel's warp count does not apply.
  p = plan(1, 64, 128, 132);
  EXPECT_FALSE(p.wide);
  EXPECT_EQ(p.n_splits, 1);
#endif
}

TEST(CudaOps, RopeAttentionEqualsRopeAppendThenAttention) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  struct Case {
    const char* name;
    int n_heads, n_kv, head_dim, rotary_dim;
    bool norms;
    std::vector<int> lengths;  // one decode row each
    bool mass = false;         // the pool records H2O's attention mass (from stale values, as after evictions)
    bool window_signals = false;  // the pool records the query ring and value ranges (SnapKV, R-KV, VaSE)
  };
  const Case cases[] = {
      {"qwen3-4b batch 1 short", 32, 8, 128, 128, true, {20}},
      {"qwen3-4b batch 1 long (splits; the last holds the new slot)", 32, 8, 128, 128, true, {2111}, true, true},
      {"qwen3-4b batch 4 mixed, first slot of a page", 32, 8, 128, 128, true, {0, 16, 255, 1000}, true},
      {"qwen3-4b batch 7, window signals", 32, 8, 128, 128, true, {0, 16, 255, 1000, 2, 64, 129}, false, true},
      // One split of eight warps whose new slot lies past the pages fetched before the wait.
      {"qwen3-4b batch 1, one split, the new slot past the prologue", 32, 8, 128, 128, true, {400}},
      {"qwen3-4b batch 1, splits as one cluster (the last holds the new slot)", 32, 8, 128, 128, true, {1000}},
      {"hd64 g7 no norms", 14, 2, 64, 64, false, {33, 700}, true, true},
      {"phi-4 batch 2, 10 KV heads", 40, 10, 128, 128, false, {20, 1000}},
      {"hd128 partial rotary", 8, 2, 128, 64, true, {5}},
      // 40 x 8 (sequence, KV head) pairs: past the SM count, so four warps a CTA (the rest take eight).
      {"qwen3-4b batch 40, four warps a CTA", 32, 8, 128, 128, true,
       {0, 1, 15, 16, 17, 31, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 257, 300, 511, 512,
        3, 7, 40, 80, 96, 150, 190, 230, 250, 270, 33, 47, 79, 111, 143, 175, 207, 239, 271, 1000},
       true, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int page_slots = 16, n_seqs = static_cast<int>(c.lengths.size());
    const int max_slots = *std::max_element(c.lengths.begin(), c.lengths.end()) + 1;
    const int max_pages = (max_slots + page_slots - 1) / page_slots + 2;
    HostBatch h = HostBatch::make(std::vector<int>(n_seqs, 1), max_pages);
    for (int s = 0; s < n_seqs; ++s) {
      h.length[s] = c.lengths[s];
      h.appended[s] = c.lengths[s] + 37 * s;  // positions run ahead of lengths after evictions
    }
    h.page_table = shuffled_page_table(n_seqs, max_pages, 71);
    // Ring rows in reverse (a reader of the batch row for the ring row fails), windows of several sizes up
    // to the ring's width (the CPU twin refuses a wider one) and sequences without a row (they record nothing).
    const int ring_rows = n_seqs + 1, ring_window = 8;
    for (int s = 0; s < n_seqs; ++s) {
      h.ring_row[s] = s % 5 == 3 ? -1 : n_seqs - s;
      h.window[s] = std::vector<int>{8, 4, 1, 8, 3, 5, 2}[size_t(s % 7)];
    }
    const int n_pages = n_seqs * max_pages;
    const size_t pool = size_t(n_pages) * c.n_kv * page_slots * c.head_dim;
    const auto k_host = random_values(pool, 72), v_host = random_values(pool, 73);
    const std::vector<int32_t> pos_host(pool / c.head_dim, -1);
    const int qkv_cols = (c.n_heads + 2 * c.n_kv) * c.head_dim;
    const auto qkv_host = random_values(size_t(n_seqs) * qkv_cols, 74, 2.0f);
    // Mass left in every slot by earlier rounds: the appended slot's must start again from zero.
    std::vector<float> mass_before(pool / c.head_dim);
    std::mt19937_64 rng(75);
    for (float& x : mass_before) x = static_cast<float>(rng() % 1000) / 100.0f;
    // Stale signals no step writes: NaN ring bits, negative ranges.
    const size_t ring_elements = size_t(ring_rows) * c.n_heads * ring_window * c.head_dim;
    const std::vector<uint16_t> ring_before(ring_elements, 0xffff);
    const std::vector<float> range_before(pool / c.head_dim, -1.0f);
    std::vector<float> out[3], keys[3], values[3], mass[3], range[3];
    std::vector<uint16_t> ring[3];
    std::vector<int32_t> positions[3];
    int i = 0;
    for (Backend* b : {pair.gpu.get(), pair.gpu.get(), pair.cpu.get()}) {
      KvLayerMemory kv(*b, n_pages, c.n_kv, page_slots, c.head_dim, 0);
      kv.upload(k_host, v_host, pos_host);
      Guarded mass_memory(*b, mass_before.size() * sizeof(float), "attention mass");
      if (c.mass) {
        b->upload(mass_memory.data(), mass_before.data(), mass_before.size() * sizeof(float));
        kv.layer.attention_mass = static_cast<float*>(mass_memory.data());
      }
      Guarded ring_memory(*b, ring_elements * sizeof(uint16_t), "query ring"),
          range_memory(*b, range_before.size() * sizeof(float), "value range");
      if (c.window_signals) {
        b->upload(ring_memory.data(), ring_before.data(), ring_elements * sizeof(uint16_t));
        b->upload(range_memory.data(), range_before.data(), range_before.size() * sizeof(float));
        kv.layer.query_ring = static_cast<uint16_t*>(ring_memory.data());
        kv.layer.n_heads = c.n_heads;
        kv.layer.ring_window = ring_window;
        kv.layer.ring_rows = ring_rows;
        kv.layer.value_range = static_cast<float*>(range_memory.data());
      }
      const int64_t q_cols = int64_t{c.n_heads} * c.head_dim;
      Matrix qkv(*b, DType::F32, n_seqs, qkv_cols, "qkv"), q(*b, b->activation_dtype(), n_seqs, q_cols, "q");
      Matrix o(*b, b->activation_dtype(), n_seqs, q_cols, "out");
      qkv.upload(qkv_host);
      const RopeTables tables(*b, c.head_dim, c.rotary_dim);
      DeviceBatch d(*b, h);
      const backend::Rope& rope = tables.rope;
      const backend::View q_norm = tables.q(c.norms), k_norm = tables.k(c.norms);
      const float scale = 1.0f / std::sqrt(float(c.head_dim));
      if (i == 0) {
        b->rope_attention(d.batch, qkv.view, q_norm, k_norm, 1e-6f, rope, kv.layer, q.view, o.view, c.n_heads,
                          scale);
      } else {
        b->Backend::rope_attention(d.batch, qkv.view, q_norm, k_norm, 1e-6f, rope, kv.layer, q.view, o.view,
                                   c.n_heads, scale);
      }
      out[i] = o.download();
      keys[i] = kv.keys.download();
      values[i] = kv.values.download();
      positions[i] = kv.download_positions();
      mass[i].resize(mass_before.size());
      b->download(mass[i].data(), mass_memory.data(), mass_before.size() * sizeof(float));
      ring[i].resize(ring_elements);
      b->download(ring[i].data(), ring_memory.data(), ring_elements * sizeof(uint16_t));
      range[i].resize(range_before.size());
      b->download(range[i].data(), range_memory.data(), range_before.size() * sizeof(float));
      EXPECT_TRUE(o.memory.sentinel_intact() && q.memory.sentinel_intact() && kv.sentinels_intact() &&
                  mass_memory.sentinel_intact() && ring_memory.sentinel_intact() && range_memory.sentinel_intact());
      ++i;
    }
    EXPECT_EQ(out[0], out[1]);
    EXPECT_EQ(keys[0], keys[1]);
    EXPECT_EQ(values[0], values[1]);
    EXPECT_EQ(positions[0], positions[1]);
    EXPECT_EQ(mass[0], mass[1]) << "attention mass, fused against the two ops";
    EXPECT_EQ(ring[0], ring[1]) << "query ring, fused against the two ops";
    EXPECT_EQ(range[0], range[1]) << "value ranges, fused against the two ops";
    EXPECT_EQ(range[0], range[2]) << "value ranges (max - min of the fp32 values), CUDA against the CPU";
    if (c.window_signals) {
      // Every sequence with a ring row writes one slot of each query head; every sequence writes its
      // appended slot's range in each KV head.
      int ring_writers = 0;
      for (int s = 0; s < n_seqs; ++s) ring_writers += h.ring_row[s] >= 0;
      size_t ring_written = 0, ranges_written = 0;
      for (size_t j = 0; j < ring_elements; ++j) ring_written += ring[0][j] != 0xffff;
      for (float x : range[0]) ranges_written += x != -1.0f;
      EXPECT_EQ(ring_written, size_t(ring_writers) * c.n_heads * c.head_dim);
      EXPECT_EQ(ranges_written, size_t(n_seqs) * c.n_kv);
    }
    EXPECT_LE(relative_error(out[0], out[2]), 1e-2);
    // fp32 weights in different orders from each backend's own RoPE'd bf16 q and k (one rounding apart
    // here and there): 1.3e-5 measured on an H100; a stale appended slot is off by about 2e-2.
    if (c.mass) EXPECT_LE(relative_error(mass[0], mass[2]), 1e-4) << "attention mass, CUDA against the CPU";
  }
}

// ---- sample ---------------------------------------------------------------------------------------

struct SampleRow {
  float temperature;
  int top_k;
  float top_p;
  int forced;  // -1 = sample; -2 = force the argmax
};

// Rows of every kind (greedy, plain, top-k, top-p, both, forced) three times: with smooth logits, with
// heavily tied ones (few distinct values) and with nearly flat ones (as random weights give: most
// tokens share the top bytes of their weights).
struct SampleRows {
  HostBatch h;
  std::vector<float> logits;  // [h.n_seqs][vocab]
};

SampleRows sample_rows(int vocab) {
  const std::vector<SampleRow> kinds = {
      {0.0f, 0, 1.0f, -1},     {1.0f, 0, 1.0f, -1},         {0.7f, 50, 1.0f, -1},
      {1.0f, 1, 1.0f, -1},     {1.0f, vocab - 1, 1.0f, -1}, {1.0f, vocab, 1.0f, -1},
      {1.0f, 0, 0.9f, -1},     {1.0f, 0, 0.0f, -1},         {0.6f, 20, 0.95f, -1},
      {1.3f, 0, 0.5f, -1},     {1.0f, 1 << 30, 0.999f, -1}, {2.5f, 7, 0.3f, -1},
      {1.0f, 0, 1.0f, 3},      {1.0f, 0, 1.0f, -2},         {1.0f, 0, 0.95f, -1},
      {1.0f, 5000, 0.95f, -1}, {0.8f, 100, 0.5f, -1},       {1.0f, 600, 0.999f, -1},
  };
  const int n = static_cast<int>(kinds.size()) * 3;
  SampleRows rows{HostBatch::make(std::vector<int>(n, 1), 1), random_values(size_t(n) * vocab, 71, 3.0f)};
  HostBatch& h = rows.h;
  for (int s = 0; s < n; ++s) {
    const SampleRow& r = kinds[s % kinds.size()];
    float* l = rows.logits.data() + size_t(s) * vocab;
    const int copy = s / static_cast<int>(kinds.size());
    if (copy == 1)
      for (int i = 0; i < vocab; ++i) l[i] = std::floor(l[i] * 0.5f);  // ties
    if (copy == 2)
      for (int i = 0; i < vocab; ++i) l[i] *= 0.01f;  // flat
    h.temperature[s] = r.temperature;
    h.top_k[s] = r.top_k;
    h.top_p[s] = r.top_p;
    h.sample_key[s] = philox_key(1234, uint64_t(s), RngDomain::Sampling);
    h.gen_step[s] = s * 3;
    h.forced[s] = r.forced == -2 ? static_cast<int>(std::max_element(l, l + vocab) - l) : r.forced;
  }
  return rows;
}

// The rows `pick` of `all`, as a batch of their own.
SampleRows select_rows(const SampleRows& all, const std::vector<int>& pick, int vocab) {
  const int n = static_cast<int>(pick.size());
  SampleRows rows{HostBatch::make(std::vector<int>(n, 1), 1), {}};
  HostBatch& h = rows.h;
  for (int s = 0; s < n; ++s) {
    const int from = pick[s];
    h.temperature[s] = all.h.temperature[from];
    h.top_k[s] = all.h.top_k[from];
    h.top_p[s] = all.h.top_p[from];
    h.sample_key[s] = all.h.sample_key[from];
    h.gen_step[s] = all.h.gen_step[from];
    h.forced[s] = all.h.forced[from];
    const float* l = all.logits.data() + size_t(from) * vocab;
    rows.logits.insert(rows.logits.end(), l, l + vocab);
  }
  return rows;
}

// Samples `draws` steps (gen_step advances the stream) on both backends and expects the same tokens,
// steps and forced scores. Returns the CPU's tokens, draw by draw.
std::vector<int32_t> expect_same_samples(BackendPair& pair, const SampleRows& rows, int vocab, int draws) {
  const int n = rows.h.n_seqs;
  std::vector<int32_t> tokens[2], steps[2];
  std::vector<float> logprob[2];
  std::vector<uint8_t> argmax[2];
  int i = 0;
  for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
    Matrix l(*b, DType::F32, n, vocab, "logits");
    l.upload(rows.logits);
    DeviceBatch d(*b, rows.h);
    for (int draw = 0; draw < draws; ++draw) {
      b->sample(d.batch, l.view);
      const auto t = d.get(d.batch.next_token, size_t(n));
      tokens[i].insert(tokens[i].end(), t.begin(), t.end());
    }
    steps[i] = d.get(d.batch.gen_step, size_t(n));
    logprob[i] = d.get(d.batch.forced_logprob, size_t(n));
    argmax[i] = d.get(d.batch.forced_is_argmax, size_t(n));
    EXPECT_TRUE(d.sentinels_intact() && l.memory.sentinel_intact());
    ++i;
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(steps[1], steps[0]);
  EXPECT_EQ(argmax[1], argmax[0]);
  for (int s = 0; s < n; ++s)
    EXPECT_NEAR(logprob[1][s], logprob[0][s], 1e-5f * (1.0f + std::fabs(logprob[0][s])));
  return tokens[0];
}

TEST(CudaOps, SampleIsBitIdentical) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  for (const int vocab : {1000, 151936}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const SampleRows rows = sample_rows(vocab);
    const HostBatch& h = rows.h;
    const std::vector<int32_t> cpu = expect_same_samples(pair, rows, vocab, 3);
    // The CPU backend itself must agree with the reference rule (guards the harness).
    for (int s = 0; s < h.n_seqs; ++s) {
      if (h.forced[s] >= 0) continue;
      const float* l = rows.logits.data() + size_t(s) * vocab;
      EXPECT_EQ(cpu[s], backend::sample_reference(l, vocab, h.temperature[s], h.top_k[s], h.top_p[s],
                                                  h.sample_key[s], uint32_t(h.gen_step[s])));
    }
  }
}

// The CUDA finish gives each row a cluster of CTAs sized by the batch (16 for a few rows, fewer as the
// rows fill the GPU, one CTA past half its SMs) and the weight pass more chunks at small batches: every
// row in batches of 1, 2, 5, 12 and 20 rows, then the flat rows in a batch of 72 whose other rows are
// greedy (cheap on the CPU), cover every size on an H100 or H200.
TEST(CudaOps, SampleSmallBatchIsBitIdentical) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  for (const int vocab : {1000, 151936}) {
    const SampleRows all = sample_rows(vocab);
    const int n = all.h.n_seqs;
    const std::vector<int> sizes = {1, 2, 5, 12, 20};
    for (int begin = 0, k = 0; begin < n; ++k) {
      const int size = std::min(sizes[k % sizes.size()], n - begin);
      SCOPED_TRACE(testing::Message() << "vocab " << vocab << " rows " << begin << ".." << begin + size - 1);
      std::vector<int> pick(static_cast<size_t>(size));
      std::iota(pick.begin(), pick.end(), begin);
      expect_same_samples(pair, select_rows(all, pick, vocab), vocab, 2);
      begin += size;
    }
    SCOPED_TRACE(testing::Message() << "vocab " << vocab << " batch of 72");
    const int kinds = n / 3;
    std::vector<int> pick(static_cast<size_t>(kinds));
    std::iota(pick.begin(), pick.end(), 2 * kinds);  // the flat copy
    for (int s = 0; s < n; ++s) pick.push_back(s);
    SampleRows wide = select_rows(all, pick, vocab);
    for (int s = kinds; s < wide.h.n_seqs; ++s) {
      wide.h.temperature[s] = 0.0f;
      wide.h.forced[s] = -1;
    }
    expect_same_samples(pair, wide, vocab, 2);
  }
}

// The spread of a row's logits sets how many tokens share the finish's crossing digit and in which
// bytes their weights still differ: every weight 2^31 (equal logits), weights an ulp apart, flat,
// smooth, and wide (most weights zero). Every spread, at top-p and at top-k with top-p, in one batch
// of 1,000-token and 151,936-token rows. (It caught a descent that left the tie count unset when no
// byte was left to refine: equal logits then always drew token 0.)
TEST(CudaOps, SampleIsBitIdenticalAtEveryLogitSpread) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  for (const int vocab : {1000, 151936}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const std::vector<float> spreads = {0.0f, 1e-7f, 1e-6f, 3e-5f, 1e-3f, 0.02f, 0.3f, 4.0f, 40.0f};
    const int n = static_cast<int>(spreads.size()) * 2;
    SampleRows rows{HostBatch::make(std::vector<int>(n, 1), 1), random_values(size_t(n) * vocab, 72, 1.0f)};
    HostBatch& h = rows.h;
    for (int s = 0; s < n; ++s) {
      const float spread = spreads[s / 2];
      float* l = rows.logits.data() + size_t(s) * vocab;
      for (int i = 0; i < vocab; ++i) l[i] = 1.5f + spread * l[i];
      h.temperature[s] = 0.7f;
      h.top_k[s] = s % 2 == 0 ? 0 : vocab / 3;
      h.top_p[s] = 0.9f;
      h.sample_key[s] = philox_key(77, uint64_t(s), RngDomain::Sampling);
      h.gen_step[s] = s;
      h.forced[s] = -1;
    }
    expect_same_samples(pair, rows, vocab, 3);
  }
}

// ---- evict ----------------------------------------------------------------------------------------

struct EvictSeq {
  int budget, window, length, appended, n_protected, policy_id;
};

// Fills both pools identically: candidate slots hold unique older positions in random slot order (as
// after earlier rounds), window slots the newest r positions in order, K/V bf16-exact noise.
struct EvictWorld {
  static constexpr int kLayers = 2, kKv = 2, kHeadDim = 32, kPageSlots = 16;
  HostBatch h;
  int n_pages = 0;
  std::vector<std::vector<float>> k, v;
  std::vector<std::vector<int32_t>> pos;

  EvictWorld(const std::vector<EvictSeq>& seqs, uint64_t seed) {
    int max_slots = 0;
    for (const EvictSeq& q : seqs) max_slots = std::max(max_slots, q.length + q.window);
    const int max_pages = (max_slots + kPageSlots - 1) / kPageSlots;
    h = HostBatch::make(std::vector<int>(seqs.size(), 1), max_pages);
    h.page_table = shuffled_page_table(h.n_seqs, max_pages, seed);
    n_pages = h.n_seqs * max_pages;
    const size_t slots = size_t(n_pages) * kKv * kPageSlots;
    std::mt19937_64 rng(seed);
    for (int l = 0; l < kLayers; ++l) {
      k.push_back(random_values(slots * kHeadDim, seed + 10 * l + 1));
      v.push_back(random_values(slots * kHeadDim, seed + 10 * l + 2));
      pos.emplace_back(slots, -1);
    }
    for (int s = 0; s < h.n_seqs; ++s) {
      const EvictSeq& q = seqs[s];
      h.budget[s] = q.budget;
      h.window[s] = q.window;
      h.length[s] = q.length;
      h.appended[s] = q.appended;
      h.n_protected[s] = q.n_protected;
      h.policy_id[s] = q.policy_id;
      h.evict_key[s] = philox_key(99, uint64_t(s), RngDomain::Eviction);
      h.round[s] = s;
      for (int l = 0; l < kLayers; ++l)
        for (int g = 0; g < kKv; ++g) {
          const int n_cand = q.length - q.window;
          // Protected prompt slots keep positions 0..pl-1; other candidates: a random older subset.
          std::vector<int32_t> older(size_t(q.appended - q.window - q.n_protected));
          std::iota(older.begin(), older.end(), q.n_protected);
          std::shuffle(older.begin(), older.end(), rng);
          for (int slot = 0; slot < q.length; ++slot) {
            int32_t p;
            if (slot < q.n_protected)
              p = slot;
            else if (slot < n_cand)
              p = older[size_t(slot - q.n_protected)];
            else
              p = q.appended - (q.length - slot);
            set_position(l, s, g, slot, p);
          }
        }
    }
  }
  size_t index(int s, int g, int slot) const {
    const int page = h.page_table[size_t(s) * h.max_pages + slot / kPageSlots];
    return (size_t(page) * kKv + g) * kPageSlots + slot % kPageSlots;
  }
  void set_position(int l, int s, int g, int slot, int32_t p) { pos[l][index(s, g, slot)] = p; }
};

struct PoolState {
  std::vector<std::vector<float>> k, v;
  std::vector<std::vector<int32_t>> pos;
  std::vector<int32_t> length, round;
  bool operator==(const PoolState&) const = default;
};

// Runs `rounds` eviction calls on one backend; between calls every due row gets r new window tokens.
PoolState run_evictions(Backend& b, const EvictWorld& w, const policy::EvictionPolicy& policy, int rounds,
                        bool* sentinels_ok) {
  std::vector<std::unique_ptr<KvLayerMemory>> layers;
  std::vector<backend::KvLayer> views;
  for (int l = 0; l < EvictWorld::kLayers; ++l) {
    layers.push_back(std::make_unique<KvLayerMemory>(b, w.n_pages, EvictWorld::kKv, EvictWorld::kPageSlots,
                                                     EvictWorld::kHeadDim, l));
    layers.back()->upload(w.k[l], w.v[l], w.pos[l]);
    views.push_back(layers.back()->layer);
  }
  DeviceBatch d(b, w.h);
  for (int round = 0; round < rounds; ++round) {
    if (round > 0) {
      // Append r tokens to rows that evicted (length == T): new window slots with the next positions.
      auto length = d.get(d.batch.length, size_t(w.h.n_seqs));
      auto appended = d.get(d.batch.appended, size_t(w.h.n_seqs));
      for (int l = 0; l < EvictWorld::kLayers; ++l) {
        auto pos = layers[l]->download_positions();
        for (int s = 0; s < w.h.n_seqs; ++s) {
          if (length[s] != w.h.budget[s] || w.h.budget[s] == 0) continue;
          for (int g = 0; g < EvictWorld::kKv; ++g)
            for (int i = 0; i < w.h.window[s]; ++i) pos[w.index(s, g, length[s] + i)] = appended[s] + i;
        }
        b.upload(layers[l]->positions.data(), pos.data(), pos.size() * sizeof(int32_t));
      }
      for (int s = 0; s < w.h.n_seqs; ++s) {
        if (length[s] != w.h.budget[s] || w.h.budget[s] == 0) continue;
        length[s] += w.h.window[s];
        appended[s] += w.h.window[s];
      }
      b.upload(d.batch.length, length.data(), length.size() * sizeof(int32_t));
      b.upload(d.batch.appended, appended.data(), appended.size() * sizeof(int32_t));
    }
    b.evict(d.batch, views, policy, 0);
  }
  PoolState state;
  for (const auto& layer : layers) {
    state.k.push_back(layer->keys.download());
    state.v.push_back(layer->values.download());
    state.pos.push_back(layer->download_positions());
    *sentinels_ok = *sentinels_ok && layer->sentinels_intact();
  }
  state.length = d.get(d.batch.length, size_t(w.h.n_seqs));
  state.round = d.get(d.batch.round, size_t(w.h.n_seqs));
  *sentinels_ok = *sentinels_ok && d.sentinels_intact();
  return state;
}

class CudaEvict : public testing::TestWithParam<std::string> {};

TEST_P(CudaEvict, RoundsMatchTheCpuBitForBit) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  const auto policy = policy::make_policy(GetParam());
  const int pl = policy->protects_prompt() ? 5 : 0;
  const std::vector<EvictSeq> seqs = {
      {48, 16, 64, 200, pl, 0},           // due
      {48, 16, 60, 60, pl, 0},            // not at a round boundary
      {48, 16, 64, 64, pl, 1},            // another policy
      {0, 16, 64, 64, 0, 0},              // no budget (full)
      {32, 8, 40, 40, pl, 0},             // due, positions in slot order
      {100, 4, 200, 300, pl ? 3 : 0, 0},  // due with 100 victims (a long prompt's first round)
      {40, 20, 60, 1000, pl, 0},          // due, the window is a third of the budget
  };
  const EvictWorld world(seqs, 81);
  bool cpu_ok = true, gpu_ok = true;
  const PoolState cpu = run_evictions(*pair.cpu, world, *policy, 3, &cpu_ok);
  const PoolState gpu = run_evictions(*pair.gpu, world, *policy, 3, &gpu_ok);
  EXPECT_TRUE(cpu_ok);
  EXPECT_TRUE(gpu_ok) << "a sentinel after a GPU buffer was overwritten";
  EXPECT_EQ(gpu.length, cpu.length);
  EXPECT_EQ(gpu.round, cpu.round);
  for (int l = 0; l < EvictWorld::kLayers; ++l) {
    EXPECT_EQ(gpu.pos[l], cpu.pos[l]) << "positions of layer " << l;
    EXPECT_EQ(gpu.k[l], cpu.k[l]) << "keys of layer " << l;
    EXPECT_EQ(gpu.v[l], cpu.v[l]) << "values of layer " << l;
  }
  // The rounds did something: the due rows are back at their budget, the others untouched.
  EXPECT_EQ(cpu.length, (std::vector<int32_t>{48, 60, 64, 64, 32, 100, 40}));
}

INSTANTIATE_TEST_SUITE_P(Policies, CudaEvict,
                         testing::Values("random_pp", "random", "random_shared", "recency_pp", "recency",
                                         "streaming", "random_block_pp", "random_block_pp:block=4",
                                         "random_block_pp:block=1", "random_block_pp:block=4,grid=candidates", "random_pp_rec", "random_pp_rec:recent=0.25",
                                         // 0.3 · K_sel = 9.6 and 0.125 · 20 = 2.5 (half to even: 2)
                                         "random_pp_rec:recent=0.3", "random_pp_rec:recent=0.125",
                                         "random_pp_rec:recent=1", "random_pp_rec:recent=0",
                                         // spans of at most 5 candidates: every due row can hold or drop them
                                         "random_pin_pp", "random_pin_pp:span=7-9+20-23",
                                         "random_pin_pp:span=7-9+20-23,heads=none",
                                         "random_pin_pp:span=7-9+20-23,layers=1,heads=0",
                                         "random_pin_pp:span=7-9+20-23,heads=1+0,deal=1",
                                         // the world's 2 KV heads: heads=2+3+5 leaves both to recency
                                         "carrier_mix", "carrier_mix:heads=1", "carrier_softmix:heads=0",
                                         // 0.3 · 27 = 8.1 and 0.3 · 93 = 27.9: floor, not round
                                         "carrier_softmix:heads=1,q=0.3", "anti_mix:heads=1",
                                         "anti_softmix:heads=0,q=0.75", "anti_softmix:heads=none"));

TEST(CudaEvictPolicies, PoliciesWithoutACudaSelectionAreRefused) {
#ifndef KVDICE_WITH_CUDA
  GTEST_SKIP() << "this build has no CUDA backend (configure with -DKVDICE_CUDA=ON)";
#else
  // The policies of the CUDA backend issue have device selections; a policy without one (the CPU-first
  // baselines) is refused with an error naming it, never run wrongly.
  for (const std::string name :
       {"random_pp", "random", "random_shared", "recency_pp", "recency", "streaming", "random_block_pp",
        "random_pp_rec"})
    EXPECT_NE(policy::cuda_selection(name), nullptr) << name;
  for (const std::string& name : policy::policy_names()) {
    // By name, not by constructing: a policy may need options to construct (triattention: stats=FILE).
    if (name == "full" || policy::cuda_selection(name) != nullptr) {
      EXPECT_NO_THROW(policy::require_cuda_selection(name)) << name;
    } else {
      try {
        policy::require_cuda_selection(name);
        ADD_FAILURE() << name << " has no CUDA selection but was not refused";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_THROW(policy::require_cuda_selection("no_such_policy"), Error);
#endif
}

TEST(CudaEvictPolicies, FullNeverEvicts) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  const auto full = policy::make_policy("full");
  const EvictWorld world({{0, 16, 64, 200, 0, 0}}, 91);  // the engine gives full rows no budget
  bool ok = true;
  const PoolState cpu = run_evictions(*pair.cpu, world, *full, 1, &ok);
  const PoolState gpu = run_evictions(*pair.gpu, world, *full, 1, &ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(gpu, cpu);
  EXPECT_EQ(gpu.length, std::vector<int32_t>{64});
}

}  // namespace
}  // namespace kvdice::test
