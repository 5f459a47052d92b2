// The CPU backend's block kernels (--cpu-math fast) against the fp32 reference on real block formats:
// the weights of tests/fixtures/gguf/quants.gguf (blocks cut from the default model, random-bit
// blocks, and blocks quantised by the gguf package), dequantised by the golden-tested formats::GgufFile.
//
// Tolerances. A kernel computes sum_i w_i * s_b q_i exactly in integers per block, so against fp32 of
// the dequantised weights and the same int8 activations it may differ only by float rounding
// (kRounding of sum |w_i x_i|). Against the unquantised activations the int8 rounding adds at most
// |w_i| * s_b / 2 per element (s_b = max|x| / 127 of the element's block): that bound is checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/quant_dot.h"
#include "core/error.h"
#include "formats/gguf.h"

namespace kvdice::backend {
namespace {

const std::string kQuants = std::string(KVDICE_FIXTURES_DIR) + "/gguf/quants.gguf";
constexpr double kRounding = 1e-5;

struct BlockMatrix {
  std::string name;
  uint32_t type;
  int64_t rows, cols, row_bytes;
  const uint8_t* data;
  std::vector<float> values;  // dequantised by formats::GgufFile
};

const formats::GgufFile& quants_file() {
  static const formats::GgufFile file = formats::GgufFile::open(kQuants);
  return file;
}

BlockMatrix block_matrix(const std::string& name) {
  const formats::GgufTensor& t = quants_file().tensor(name);
  BlockMatrix m{name,          static_cast<uint32_t>(t.type), t.dims[1], t.dims[0], 0,
                t.data.data(), quants_file().dequantize(t)};
  m.row_bytes = cpu::block_row_bytes(m.type, m.cols);
  return m;
}

bool row_is_finite(const BlockMatrix& m, int64_t r) {
  for (int64_t i = 0; i < m.cols; ++i)
    if (!std::isfinite(m.values[static_cast<size_t>(r * m.cols + i)])) return false;
  return true;
}

// Activations with a spread of magnitudes and signs, and one all-zero block (scale 0).
std::vector<float> activations(int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double t = static_cast<double>(i);
    x[static_cast<size_t>(i)] = static_cast<float>(
        std::sin(0.37 * t + 1.0) * (1.0 + 3.0 * std::cos(0.011 * t)) + (i % 97 == 0 ? 7.5 : 0.0));
  }
  for (int i = 0; i < 32 && i < cols; ++i) x[static_cast<size_t>(i)] = 0.0f;
  return x;
}

const char* kNames[] = {"Q5_0.real",      "Q5_0.random", "Q5_0.quantized", "Q8_0.real", "Q8_0.random",
                        "Q8_0.quantized", "Q4_K.real",   "Q4_K.random",    "Q6_K.real", "Q6_K.random"};

TEST(QuantDot, DequantizedRowIsBitExactWithGgufDequantisation) {
  for (const char* name : kNames) {
    const BlockMatrix m = block_matrix(name);
    for (int64_t r = 0; r < m.rows; ++r) {
      std::vector<float> got(static_cast<size_t>(m.cols));
      cpu::dequantize_row(m.type, m.data + r * m.row_bytes, m.cols, got.data());
      for (int64_t i = 0; i < m.cols; ++i) {
        const float want = m.values[static_cast<size_t>(r * m.cols + i)];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[static_cast<size_t>(i)])) << name << " row " << r << " [" << i << "]";
        } else {
          ASSERT_EQ(got[static_cast<size_t>(i)], want) << name << " row " << r << " [" << i << "]";
        }
      }
    }
  }
}

// Each row's first `cols` columns: the whole row, and 1 and 3 blocks (odd counts, which kernels that
// take two blocks at a step finish with one alone).
TEST(QuantDot, EveryKernelEqualsFp32OfTheDequantisedWeights) {
  int checked = 0;
  for (cpu::Isa isa : cpu::available_isas()) {
    for (const char* name : kNames) {
      const BlockMatrix m = block_matrix(name);
      const int64_t be = cpu::block_elements(m.type);
      for (int64_t cols : {m.cols, be, 3 * be}) {
        if (cols > m.cols) continue;
        SCOPED_TRACE(std::string(name) + " on " + std::string(cpu::isa_name(isa)) + ", " +
                     std::to_string(cols) + " columns");
        const std::vector<float> x = activations(1, cols);
        cpu::QuantizedRows xq;
        cpu::quantize_rows(x.data(), 1, cols, cols, xq);
        const cpu::RowDot dot = cpu::row_dot(m.type, isa);
        for (int64_t r = 0; r < m.rows; ++r) {
          if (!row_is_finite(m, r)) continue;  // random bits can make an f16 scale inf or NaN
          const float* w = m.values.data() + r * m.cols;
          double same_inputs = 0.0, exact = 0.0, magnitude = 0.0, rounding_bound = 0.0;
          for (int64_t i = 0; i < cols; ++i) {
            const double s = xq.scale[static_cast<size_t>(i / 32)];
            const double xhat = s * xq.q[static_cast<size_t>(i)];
            same_inputs += static_cast<double>(w[i]) * xhat;
            exact += static_cast<double>(w[i]) * x[static_cast<size_t>(i)];
            magnitude += std::fabs(static_cast<double>(w[i]) * xhat);
            rounding_bound += std::fabs(w[i]) * s / 2.0;
          }
          const double got = dot(m.data + r * m.row_bytes, xq, 0);
          EXPECT_NEAR(got, same_inputs, kRounding * magnitude + 1e-6) << "row " << r;
          EXPECT_NEAR(got, exact, rounding_bound * (1.0 + 1e-3) + kRounding * magnitude + 1e-6)
              << "row " << r;
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, 30);
}

// The tile kernel (prefill's many-row matmul) against the one-row kernel, bit for bit (NaN and inf from
// random-bit scales included), for every tile size and start at odd row and column counts: a row's
// output must not depend on the batch it came in.
TEST(QuantDot, TileKernelIsBitIdenticalToTheOneRowKernel) {
  int checked = 0;
  for (cpu::Isa isa : cpu::available_isas()) {
    for (const char* name : kNames) {
      const BlockMatrix m = block_matrix(name);
      const int64_t be = cpu::block_elements(m.type);
      std::vector<int64_t> col_counts{be, 3 * be};
      if (m.cols / be % 2 == 1 && m.cols > 3 * be) col_counts.push_back(m.cols);
      for (int64_t cols : col_counts) {
        if (cols > m.cols) continue;
        for (int64_t rows : {1, 3, 7, 8, 9, 33}) {
          SCOPED_TRACE(std::string(name) + " on " + std::string(cpu::isa_name(isa)) + ", " +
                       std::to_string(rows) + " rows x " + std::to_string(cols) + " columns");
          const std::vector<float> x = activations(rows, cols);
          cpu::QuantizedRows xq;
          cpu::quantize_rows(x.data(), rows, cols, cols, xq);
          const cpu::RowDot one = cpu::row_dot(m.type, isa);
          const cpu::TileDot tile = cpu::tile_dot(m.type, isa);
          for (int64_t o = 0; o < std::min<int64_t>(m.rows, 6); ++o) {
            const uint8_t* w = m.data + o * m.row_bytes;
            std::vector<uint32_t> want(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r)
              want[static_cast<size_t>(r)] = std::bit_cast<uint32_t>(one(w, xq, r));
            for (int n = 1; n <= cpu::kTileRows; ++n) {
              for (int64_t r0 = 0; r0 + n <= rows; ++r0) {
                float got[cpu::kTileRows];
                tile(w, xq, r0, n, got);
                for (int i = 0; i < n; ++i) {
                  ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), want[static_cast<size_t>(r0 + i)])
                      << "weight row " << o << ", tile of " << n << " at row " << r0 << ", row " << r0 + i;
                  ++checked;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 1000);
}

// The run kernel (decode's matmul: consecutive weight rows against one activation row) against the
// one-row kernel, bit for bit, for every run length and start, at block counts that leave a partial
// stretch of 8 blocks (Q5_0 / Q8_0 at 896 columns: 28 blocks).
TEST(QuantDot, RunKernelIsBitIdenticalToTheOneRowKernel) {
  int checked = 0;
  for (cpu::Isa isa : cpu::available_isas()) {
    for (const char* name : kNames) {
      const BlockMatrix m = block_matrix(name);
      const int64_t be = cpu::block_elements(m.type);
      for (int64_t cols : {be, 3 * be, m.cols}) {
        if (cols > m.cols) continue;
        SCOPED_TRACE(std::string(name) + " on " + std::string(cpu::isa_name(isa)) + ", " +
                     std::to_string(cols) + " columns");
        const std::vector<float> x = activations(2, cols);
        cpu::QuantizedRows xq;
        cpu::quantize_rows(x.data(), 2, cols, cols, xq);
        const cpu::RowDot one = cpu::row_dot(m.type, isa);
        const cpu::RunDot run = cpu::run_dot(m.type, isa);
        const int64_t row_bytes = m.row_bytes;  // rows keep their full stride; the dot reads `cols`
        for (int64_t r = 0; r < 2; ++r) {
          for (int n = 1; n <= cpu::kRunRows; ++n) {
            for (int64_t o0 = 0; o0 + n <= std::min<int64_t>(m.rows, 9); ++o0) {
              float got[cpu::kRunRows];
              run(m.data + o0 * row_bytes, row_bytes, n, xq, r, got, m.data + m.rows * row_bytes);
              for (int j = 0; j < n; ++j) {
                const float want = one(m.data + (o0 + j) * row_bytes, xq, r);
                ASSERT_EQ(std::bit_cast<uint32_t>(got[j]), std::bit_cast<uint32_t>(want))
                    << "run of " << n << " from weight row " << o0 << ", row " << o0 + j << ", x row " << r;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 500);
}

TEST(QuantDot, QuantisedActivationsRoundToNearestWithinTheirBlockScale) {
  const std::vector<float> x = activations(2, 96);
  cpu::QuantizedRows xq;
  cpu::quantize_rows(x.data(), 2, 64, 96, xq);  // ld > cols: only the first 64 of each row
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 64; ++i) {
      const float s = xq.scale_row(r)[i / 32];
      EXPECT_LE(std::fabs(x[static_cast<size_t>(r * 96 + i)] - s * xq.q_row(r)[i]),
                s / 2.0f * 1.0001f + 1e-30f);
    }
  EXPECT_EQ(xq.scale_row(0)[0], 0.0f);  // the all-zero block
  int32_t sum = 0;
  for (int i = 16; i < 32; ++i) sum += xq.q_row(1)[i];
  EXPECT_EQ(xq.sum16_row(1)[1], sum);
}

// quantize_rows against the plain loop (std::nearbyint, the block's max|x| by std::max), bit for bit:
// halves round to even (127 / max|x| = 1 here, so x = k + 0.5 is a tie), signs, zeros, a NaN (ignored by
// the maximum) and the scaled sums the kernels read.
TEST(QuantDot, QuantisationEqualsThePlainLoopBitForBit) {
  const int64_t cols = 96;
  std::vector<float> x = activations(1, cols);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(32 + i)] = static_cast<float>(i - 16) + 0.5f;
  x[32] = 127.0f;  // max|x| of the block: the scale is exactly 1
  cpu::QuantizedRows xq;
  cpu::quantize_rows(x.data(), 1, cols, cols, xq);
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(32 * b + i)]));
    const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    EXPECT_EQ(std::bit_cast<uint32_t>(xq.scale_row(0)[b]), std::bit_cast<uint32_t>(d)) << "block " << b;
    int32_t sums[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int v = static_cast<int>(std::nearbyint(x[static_cast<size_t>(32 * b + i)] * inv));
      ASSERT_EQ(xq.q_row(0)[32 * b + i], v)
          << "element " << 32 * b + i << " = " << x[static_cast<size_t>(32 * b + i)];
      sums[i / 16] += v;
    }
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(xq.sum16_row(0)[2 * b + h], sums[h]);
      EXPECT_EQ(xq.ssum16_row(0)[2 * b + h], d * static_cast<float>(sums[h]));
    }
    EXPECT_EQ(xq.ssum32_row(0)[b], d * static_cast<float>(sums[0] + sums[1]));
  }
  EXPECT_EQ(xq.q_row(0)[33], -14);  // -14.5 rounds to even
  EXPECT_EQ(xq.q_row(0)[34], -14);  // -13.5 too
}

// The backend's matmul over one weight stacked from parts of four block types, against the exact
// backend on the dequantised rows: several x rows, bias, accumulate.
TEST(QuantDot, MatmulOverStackedBlockRowsMatchesTheExactBackend) {
  std::vector<BlockMatrix> parts;
  for (const char* name : {"Q5_0.real", "Q8_0.real", "Q4_K.random", "Q6_K.random"})
    parts.push_back(block_matrix(name));
  const int64_t cols = 512, rows = 3;
  Weight quantised;
  std::vector<float> dense;
  for (const BlockMatrix& m : parts) {
    ASSERT_EQ(m.cols, cols) << m.name;
    for (int64_t r = 0; r < m.rows; ++r) ASSERT_TRUE(row_is_finite(m, r)) << m.name;
    quantised.blocks.push_back({m.type, m.data, m.rows, m.row_bytes});
    dense.insert(dense.end(), m.values.begin(), m.values.end());
  }
  const int64_t out = static_cast<int64_t>(dense.size()) / cols;
  std::vector<float> bias(static_cast<size_t>(out)), x = activations(rows, cols);
  for (int64_t o = 0; o < out; ++o) bias[static_cast<size_t>(o)] = 0.25f * static_cast<float>(o) - 1.0f;
  std::vector<float> y_fast(static_cast<size_t>(rows * out), 0.5f), y_exact = y_fast;
  const View wv{dense.data(), DType::F32, out, cols, cols};
  const View bv{bias.data(), DType::F32, 1, out, out};
  quantised.w = View{nullptr, DType::F32, out, cols, cols};
  quantised.bias = bv;
  auto fast = make_cpu_backend(2, CpuMath::Fast);
  auto exact = make_cpu_backend(2, CpuMath::Exact);
  EXPECT_FALSE(fast->block_weight_types().empty());
  EXPECT_TRUE(exact->block_weight_types().empty());
  fast->matmul(View{x.data(), DType::F32, rows, cols, cols}, quantised,
               View{y_fast.data(), DType::F32, rows, out, out}, true);
  exact->matmul(View{x.data(), DType::F32, rows, cols, cols}, Weight{wv, bv},
                View{y_exact.data(), DType::F32, rows, out, out}, true);
  cpu::QuantizedRows xq;
  cpu::quantize_rows(x.data(), rows, cols, cols, xq);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double bound = 1e-5;
      for (int64_t i = 0; i < cols; ++i)
        bound +=
            std::fabs(dense[static_cast<size_t>(o * cols + i)]) *
            (xq.scale_row(r)[i / 32] / 2.0 * 1.001 + 1e-4 * std::fabs(x[static_cast<size_t>(r * cols + i)]));
      EXPECT_NEAR(y_fast[static_cast<size_t>(r * out + o)], y_exact[static_cast<size_t>(r * out + o)], bound)
          << "row " << r << " output " << o;
    }
}

// The backend's matmul over stacked block parts gives each x row the same bits whatever batch it came
// in: alone (decode's runs of weight rows), 3 rows (runs), 9 and 17 rows (tiles of 8 and a remainder),
// accumulating into the same starting values.
TEST(QuantDot, MatmulRowsDoNotDependOnTheirBatch) {
  std::vector<BlockMatrix> parts;
  for (const char* name : {"Q5_0.real", "Q8_0.real", "Q4_K.random", "Q6_K.random"})
    parts.push_back(block_matrix(name));
  const int64_t cols = 512;
  Weight w;
  int64_t out = 0;
  for (const BlockMatrix& m : parts) {
    w.blocks.push_back({m.type, m.data, m.rows, m.row_bytes});
    out += m.rows;
  }
  w.w = View{nullptr, DType::F32, out, cols, cols};
  auto fast = make_cpu_backend(2, CpuMath::Fast);
  const int64_t max_rows = 17;
  const std::vector<float> x = activations(max_rows, cols);
  const auto start = [&](int64_t r, int64_t o) {
    return 0.125f * static_cast<float>((r * 7 + o) % 13) - 0.5f;
  };
  std::vector<float> alone(static_cast<size_t>(max_rows * out));
  for (int64_t r = 0; r < max_rows; ++r) {
    std::vector<float> y(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) y[static_cast<size_t>(o)] = start(r, o);
    fast->matmul(View{const_cast<float*>(x.data()) + r * cols, DType::F32, 1, cols, cols}, w,
                 View{y.data(), DType::F32, 1, out, out}, true);
    std::copy(y.begin(), y.end(), alone.begin() + r * out);
  }
  for (int64_t rows : {3, 9, 17}) {
    std::vector<float> y(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) y[static_cast<size_t>(r * out + o)] = start(r, o);
    fast->matmul(View{const_cast<float*>(x.data()), DType::F32, rows, cols, cols}, w,
                 View{y.data(), DType::F32, rows, out, out}, true);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o)
        ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(r * out + o)]),
                  std::bit_cast<uint32_t>(alone[static_cast<size_t>(r * out + o)]))
            << rows << " rows: row " << r << " output " << o;
  }
}

TEST(QuantDot, EmbeddingRowsComeFromTheRightPart) {
  const BlockMatrix a = block_matrix("Q5_0.random"), b = block_matrix("Q8_0.random");
  ASSERT_EQ(a.cols, b.cols);
  Weight table;
  table.blocks = {{a.type, a.data, a.rows, a.row_bytes}, {b.type, b.data, b.rows, b.row_bytes}};
  table.w = View{nullptr, DType::F32, a.rows + b.rows, a.cols, a.cols};
  std::vector<int32_t> tokens = {3, 0, 2};  // b's row 1, a's row 0, b's row 0
  StepBatch batch;
  batch.n_rows = 3;
  batch.tokens = tokens.data();
  std::vector<float> x(static_cast<size_t>(3 * a.cols));
  make_cpu_backend(1, CpuMath::Fast)
      ->embed_blocks(batch, table, View{x.data(), DType::F32, 3, a.cols, a.cols});
  const float* want[] = {b.values.data() + b.cols, a.values.data(), b.values.data()};
  for (int r = 0; r < 3; ++r)
    for (int64_t i = 0; i < a.cols; ++i) {
      const float w = want[r][i], g = x[static_cast<size_t>(r * a.cols + i)];
      if (std::isnan(w)) continue;
      ASSERT_EQ(g, w) << "token row " << r << " [" << i << "]";
    }
}

TEST(QuantDot, UnknownCpuMathIsAnErrorNamingIt) {
  BackendOptions options;
  options.name = "cpu";
  options.cpu_math = "approximate";
  try {
    make_backend(options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu-math must be fast or exact (got 'approximate')"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvdice::backend
