// The CPU backend's 16-bit weight kernels (--cpu-math fast on bf16 / fp16 checkpoints) against the
// fp32 reference of the widened weights, every kernel set this CPU runs.
//
// Tolerances. Widening bf16 or fp16 to fp32 is exact, so the fp32-product kernels differ from a
// double-precision dot of the same values only by fp32 rounding of the sums: at most
// kSumRounding of sum |w_i x_i| at these lengths (<= 1,000 elements in 8 or 16 lanes). The
// bf16-product kernel (vdpbf16ps) also rounds each activation to bf16 (relative error <= 2^-9):
// it is held to the dot with bf16(x) within kSumRounding and to the unrounded one within
// 2^-9 x sum |w_i x_i| more.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/half_dot.h"
#include "core/dtype.h"
#include "formats/safetensors.h"
#include "kv/sequence_kv.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"

namespace kvdice::backend {
namespace {

constexpr double kSumRounding = 2e-6;

}  // namespace

uint16_t to_f16_for_tests(float f);
uint16_t to_f16_for_tests(float f) {  // fp32 to fp16, round to nearest even (finite inputs below 65504)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int exponent = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = u & 0x7fffffu;
  if (exponent < -10) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  if (exponent <= 0) {                                     // subnormal half
    mantissa |= 0x800000u;
    const int shift = 14 - exponent;
    uint32_t h = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

namespace {
uint16_t to_f16(float f) { return to_f16_for_tests(f); }

// A [rows, cols] weight of 16-bit values of a spread of magnitudes (zeros, fp16 subnormals for F16)
// and signs, with its exact fp32 values.
struct HalfMatrix {
  uint32_t type;
  int64_t rows, cols;
  std::vector<uint16_t> bits;
  std::vector<float> values;
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(bits.data()); }
  int64_t row_bytes() const { return 2 * cols; }
};

HalfMatrix half_matrix(uint32_t type, int64_t rows, int64_t cols) {
  HalfMatrix m{type, rows, cols, {}, {}};
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double t = static_cast<double>(i);
    float v = static_cast<float>(std::sin(0.61 * t + 0.3) * std::exp(2.0 * std::cos(0.017 * t)) * 0.05);
    if (i % 53 == 0) v = 0.0f;
    if (type == cpu::kF16 && i % 71 == 5) v = 3e-6f;  // an fp16 subnormal
    const uint16_t h = type == cpu::kBF16 ? f32_to_bf16(v) : to_f16(v);
    m.bits.push_back(h);
    m.values.push_back(type == cpu::kBF16 ? bf16_to_f32(h) : f16_to_f32(h));
  }
  return m;
}

std::vector<float> activations(int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double t = static_cast<double>(i);
    x[static_cast<size_t>(i)] = static_cast<float>(
        std::sin(0.37 * t + 1.0) * (1.0 + 3.0 * std::cos(0.011 * t)) + (i % 97 == 0 ? 7.5 : 0.0));
  }
  return x;
}

// Lengths with every tail: shorter than a vector, a vector and one, whole 32-element steps, a
// hidden size and odd sizes around it.
const int64_t kCols[] = {1, 7, 16, 31, 32, 33, 64, 100, 896, 901};

TEST(HalfDot, EveryKernelEqualsFp32OfTheWidenedWeights) {
  int checked = 0;
  for (cpu::HalfIsa isa : cpu::available_half_isas()) {
    for (uint32_t type : {cpu::kBF16, cpu::kF16}) {
      const cpu::HalfDot dot = cpu::half_dot(type, isa);
      const bool bf16_rows = cpu::needs_bf16_rows(type, isa);
      for (int64_t cols : kCols) {
        SCOPED_TRACE(std::string(cpu::half_isa_name(isa)) + (type == cpu::kBF16 ? " bf16, " : " f16, ") +
                     std::to_string(cols) + " columns");
        const HalfMatrix m = half_matrix(type, 5, cols);
        const std::vector<float> x = activations(1, cols);
        std::vector<uint16_t> xb;
        cpu::round_rows_to_bf16(x.data(), 1, cols, cols, xb);
        const cpu::HalfRows hx{x.data(), cols, bf16_rows ? xb.data() : nullptr, cols};
        for (int64_t r = 0; r < m.rows; ++r) {
          double exact = 0.0, rounded_x = 0.0, magnitude = 0.0;
          for (int64_t i = 0; i < cols; ++i) {
            const double w = m.values[static_cast<size_t>(r * cols + i)], xi = x[static_cast<size_t>(i)];
            exact += w * xi;
            rounded_x += w * bf16_to_f32(xb[static_cast<size_t>(i)]);
            magnitude += std::fabs(w * xi);
          }
          float got = 0.0f;
          dot(m.data() + r * m.row_bytes(), m.row_bytes(), 1, hx, 0, 1, &got);
          if (bf16_rows) {
            EXPECT_NEAR(got, rounded_x, kSumRounding * magnitude + 1e-7) << "row " << r;
            EXPECT_NEAR(got, exact, (kSumRounding + std::ldexp(1.0, -9)) * magnitude + 1e-7) << "row " << r;
          } else {
            EXPECT_NEAR(got, exact, kSumRounding * magnitude + 1e-7) << "row " << r;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, 2 * 10 * 5);
}

// Every (weight rows, activation rows) shape the backend asks for gives each pair the bits of the
// one-pair call: a row's output does not depend on its batch, its run or its tile.
TEST(HalfDot, EveryShapeIsBitIdenticalToTheOnePairCall) {
  for (cpu::HalfIsa isa : cpu::available_half_isas()) {
    for (uint32_t type : {cpu::kBF16, cpu::kF16}) {
      const cpu::HalfDot dot = cpu::half_dot(type, isa);
      for (int64_t cols : {33, 100, 901}) {
        SCOPED_TRACE(std::string(cpu::half_isa_name(isa)) + (type == cpu::kBF16 ? " bf16, " : " f16, ") +
                     std::to_string(cols) + " columns");
        const HalfMatrix m = half_matrix(type, 4, cols);
        const std::vector<float> x = activations(8, cols);
        std::vector<uint16_t> xb;
        cpu::round_rows_to_bf16(x.data(), 8, cols, cols, xb);
        const cpu::HalfRows hx{x.data(), cols, xb.data(), cols};
        float one[4][8];
        for (int a = 0; a < 4; ++a)
          for (int b = 0; b < 8; ++b)
            dot(m.data() + a * m.row_bytes(), m.row_bytes(), 1, hx, b, 1, &one[a][b]);
        for (int n_w = 1; n_w <= 4; ++n_w)
          for (int n_x = 1; n_w * n_x <= cpu::kHalfMaxPairs; ++n_x) {
            float out[cpu::kHalfMaxPairs];
            dot(m.data(), m.row_bytes(), n_w, hx, 8 - n_x, n_x, out);
            for (int a = 0; a < n_w; ++a)
              for (int b = 0; b < n_x; ++b)
                ASSERT_EQ(std::bit_cast<uint32_t>(out[a * n_x + b]),
                          std::bit_cast<uint32_t>(one[a][8 - n_x + b]))
                    << n_w << " x " << n_x << ": weight row " << a << ", activation row " << b;
          }
      }
    }
  }
}

TEST(HalfDot, WidenedRowsAreTheStoredValues) {
  for (uint32_t type : {cpu::kBF16, cpu::kF16}) {
    const HalfMatrix m = half_matrix(type, 1, 200);
    std::vector<float> got(200);
    cpu::widen_half_row(type, m.data(), 200, got.data());
    for (int i = 0; i < 200; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], m.values[static_cast<size_t>(i)]) << i;
  }
}

// The backend's matmul over a weight stacked from a bf16 and an fp16 part, 1, 3 (runs) and 11 rows
// (tiles), bias and accumulate, against the exact backend on the widened values; and each row's bits
// the same in every batch. 3,000 columns make prefill's stretches of weight rows 2 rows long, so the
// tiles cross many stretch ends.
TEST(HalfDot, MatmulOverSixteenBitPartsMatchesTheExactBackend) {
  for (const int64_t cols : {96, 3000}) {
    SCOPED_TRACE(std::to_string(cols) + " columns");
    const HalfMatrix a = half_matrix(cpu::kBF16, 37, cols), b = half_matrix(cpu::kF16, 30, cols);
    const int64_t out = a.rows + b.rows;
    Weight half;
    half.blocks = {{a.type, a.data(), a.rows, a.row_bytes()}, {b.type, b.data(), b.rows, b.row_bytes()}};
    half.w = View{nullptr, DType::F32, out, cols, cols};
    std::vector<float> dense = a.values;
    dense.insert(dense.end(), b.values.begin(), b.values.end());
    std::vector<float> bias(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) bias[static_cast<size_t>(o)] = 0.25f * static_cast<float>(o % 7) - 1.0f;
    const View bv{bias.data(), DType::F32, 1, out, out};
    half.bias = bv;
    auto fast = make_cpu_backend(2, CpuMath::Fast);
    auto exact = make_cpu_backend(2, CpuMath::Exact);
    const std::vector<float> x = activations(11, cols);
    const auto start = [](int64_t r, int64_t o) {
      return 0.125f * static_cast<float>((r * 7 + o) % 13) - 0.5f;
    };
    std::vector<float> alone(static_cast<size_t>(11 * out));
    for (int64_t rows : {1, 3, 11}) {
      for (int64_t r0 = 0; r0 + rows <= 11; r0 += rows) {
        std::vector<float> y_fast(static_cast<size_t>(rows * out)), y_exact;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = 0; o < out; ++o) y_fast[static_cast<size_t>(r * out + o)] = start(r0 + r, o);
        y_exact = y_fast;
        const View xv{const_cast<float*>(x.data()) + r0 * cols, DType::F32, rows, cols, cols};
        fast->matmul(xv, half, View{y_fast.data(), DType::F32, rows, out, out}, true);
        exact->matmul(xv, Weight{View{dense.data(), DType::F32, out, cols, cols}, bv},
                      View{y_exact.data(), DType::F32, rows, out, out}, true);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = 0; o < out; ++o) {
            double magnitude = 1.0;
            for (int64_t i = 0; i < cols; ++i)
              magnitude += std::fabs(dense[static_cast<size_t>(o * cols + i)] *
                                     x[static_cast<size_t>((r0 + r) * cols + i)]);
            const float got = y_fast[static_cast<size_t>(r * out + o)];
            EXPECT_NEAR(got, y_exact[static_cast<size_t>(r * out + o)],
                        (4e-6 + std::ldexp(1.0, -9)) * magnitude)
                << rows << " rows: row " << r0 + r << " output " << o;
            float& first = alone[static_cast<size_t>((r0 + r) * out + o)];
            if (rows == 1) {
              first = got;
            } else {
              ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(first))
                  << rows << " rows: row " << r0 + r << " output " << o;
            }
          }
      }
    }
  }
}

TEST(HalfDot, EmbeddingRowsAreTheStoredValues) {
  const HalfMatrix a = half_matrix(cpu::kBF16, 3, 64), b = half_matrix(cpu::kF16, 2, 64);
  Weight table;
  table.blocks = {{a.type, a.data(), a.rows, a.row_bytes()}, {b.type, b.data(), b.rows, b.row_bytes()}};
  table.w = View{nullptr, DType::F32, 5, 64, 64};
  std::vector<int32_t> tokens = {4, 0, 2};  // b's row 1, a's rows 0 and 2
  StepBatch batch;
  batch.n_rows = 3;
  batch.tokens = tokens.data();
  std::vector<float> x(3 * 64);
  make_cpu_backend(1, CpuMath::Fast)->embed_blocks(batch, table, View{x.data(), DType::F32, 3, 64, 64});
  const float* want[] = {b.values.data() + 64, a.values.data(), a.values.data() + 128};
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 64; ++i) ASSERT_EQ(x[static_cast<size_t>(r * 64 + i)], want[r][i]) << r << " " << i;
}

}  // namespace
}  // namespace kvdice::backend

namespace kvdice::model {
namespace {

namespace fs = std::filesystem;

// The tiny Qwen3 fixture rewritten with every tensor as `dtype` (BF16 or F16), beside its config.
void write_16bit_checkpoint(const fs::path& dir, const std::string& dtype) {
  const fs::path fixture = fs::path(KVDICE_FIXTURES_DIR) / "qwen3";
  const formats::SafetensorsSource source(fixture);
  std::vector<st_test::TestTensor> tensors;
  for (const formats::TensorInfo& info : source.list()) {
    const Tensor t = source.load_f32(info.name);
    std::vector<uint16_t> bits;
    for (float v : t.data)
      bits.push_back(dtype == "BF16" ? f32_to_bf16(v) : kvdice::backend::to_f16_for_tests(v));
    tensors.push_back({info.name, dtype, info.shape, st_test::u16_bytes(bits)});
  }
  st_test::write_bytes(dir / "model.safetensors", st_test::safetensors_bytes(tensors));
  fs::copy_file(fixture / "config.json", dir / "config.json");
}

// A 16-bit checkpoint on the fast CPU backend: every matrix stays as mapped (none converted), and the
// teacher-forced logits of 40 tokens equal the exact backend's on the same checkpoint (widened to
// fp32 at load) within kLogitTolerance, with the same greedy token wherever the exact logits lead by
// more than twice that. Measured worst |fast - exact| on this fixture: 1e-5 with fp32 products (F16,
// and BF16 without AVX512_BF16), 0.039 with bf16 products (the activations rounded to 8 significant
// bits, as the CUDA backend's bf16 activations are).
constexpr float kLogitTolerance = 0.08f;

TEST(HalfDot, SixteenBitCheckpointStaysMappedAndMatchesTheExactPath) {
  for (const std::string dtype : {"BF16", "F16"}) {
    SCOPED_TRACE(dtype);
    st_test::TempDir dir;
    write_16bit_checkpoint(dir.path(), dtype);
    const ModelConfig config = ModelConfig::from_hf_dir(dir.path());
    auto fast = backend::make_cpu_backend(2, backend::CpuMath::Fast);
    auto exact = backend::make_cpu_backend(2, backend::CpuMath::Exact);
    std::unique_ptr<Model> fast_model, exact_model;
    {
      const auto source = formats::open_safetensors_dir(dir.path());
      fast_model =
          std::make_unique<Model>(config, load_weights(config, *source, {fast->block_weight_types()}));
      exact_model =
          std::make_unique<Model>(config, load_weights(config, *source, {exact->block_weight_types()}));
    }  // the source is gone: the kept matrices live on through ModelWeights::storage
    const uint32_t type = dtype == "BF16" ? backend::cpu::kBF16 : backend::cpu::kF16;
    const ModelWeights& w = fast_model->weights();
    EXPECT_EQ(w.embed_blocks.ggml_type, type);
    EXPECT_TRUE(w.embed.empty());
    for (const LayerWeights& l : w.layers) {
      EXPECT_TRUE(l.wq.empty() && l.wk.empty() && l.wv.empty() && l.wo.empty() && l.w_gate.empty() &&
                  l.w_up.empty() && l.w_down.empty());
      EXPECT_EQ(l.wq_blocks.ggml_type, type);
      EXPECT_EQ(l.w_down_blocks.ggml_type, type);
    }
    EXPECT_TRUE(exact_model->weights().embed_blocks.empty());
    // TriAttention's fingerprint reads the q projections kept 16-bit as the fp32 copies.
    const std::vector<float> fast_norms = fast_model->q_weight_norms(),
                             exact_norms = exact_model->q_weight_norms();
    ASSERT_EQ(fast_norms.size(), exact_norms.size());
    for (size_t i = 0; i < fast_norms.size(); ++i) EXPECT_FLOAT_EQ(fast_norms[i], exact_norms[i]);

    std::vector<int> tokens;
    for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % config.vocab);
    kv::SequenceKv kv_fast(fast_model->kv_shape(), 64), kv_exact(exact_model->kv_shape(), 64);
    const SequenceStep step_fast{&kv_fast, tokens}, step_exact{&kv_exact, tokens};
    const Tensor lf = fast_model->forward(*fast, std::span<const SequenceStep>(&step_fast, 1), true);
    const Tensor le = exact_model->forward(*exact, std::span<const SequenceStep>(&step_exact, 1), true);
    ASSERT_EQ(lf.shape, le.shape);
    float worst = 0.0f;
    for (int64_t r = 0; r < le.dim(0); ++r) {
      const float* a = lf.ptr() + r * config.vocab;
      const float* b = le.ptr() + r * config.vocab;
      int best = 0, second = -1;
      for (int v = 0; v < config.vocab; ++v) {
        worst = std::max(worst, std::fabs(a[v] - b[v]));
        if (b[v] > b[best])
          second = best, best = v;
        else if (v != best && (second < 0 || b[v] > b[second]))
          second = v;
      }
      const int fast_best = static_cast<int>(std::max_element(a, a + config.vocab) - a);
      if (b[best] - b[second] > 2 * kLogitTolerance) EXPECT_EQ(fast_best, best) << "position " << r;
    }
    EXPECT_LE(worst, kLogitTolerance);
    std::printf("%s: worst |fast - exact| logit %.3g\n", dtype.c_str(), worst);
  }
}

}  // namespace
}  // namespace kvdice::model
