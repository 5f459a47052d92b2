// The CPU backend's fp32 matmul (fp32 checkpoints, --cpu-math exact, the reference every other path is
// held to) gives each x row the same bits whatever batch it came in and however many threads run it:
// a seeded request then decodes the same tokens alone and in a batch. Its sums used to follow the
// batch (one row took OpenBLAS's sgemv, more rows its sgemm, and the output slices the thread count),
// which moved a row's last bits with the rows beside it.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace kvdice::backend {
namespace {

std::vector<float> normal(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Row r of `rows` x rows times w, into starting values that depend on (r, o) only (accumulate) or not.
std::vector<float> product(Backend& backend, const std::vector<float>& x, int64_t first, int64_t rows,
                           const Weight& w, bool accumulate) {
  const int64_t in = w.w.cols, out = w.w.rows;
  std::vector<float> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o)
      y[static_cast<size_t>(r * out + o)] = 0.125f * static_cast<float>(((first + r) * 7 + o) % 13) - 0.5f;
  backend.matmul(View{const_cast<float*>(x.data()) + first * in, DType::F32, rows, in, in}, w,
                 View{y.data(), DType::F32, rows, out, out}, accumulate);
  return y;
}

// At the fixture's shapes (64 -> 256, 64 -> 746, 96 -> 64) and at a real one's (2560 -> 300, several
// slices of fewer than 64 weight rows): every row of batches of 2, 3, 5, 8, 16 and 17 rows, at 1, 2 and
// 3 threads, equals the row alone at 1 thread, bit for bit.
TEST(CpuMatmulF32, RowsDoNotDependOnTheirBatchOrTheThreads) {
  struct Shape {
    int64_t in, out;
  };
  const int64_t max_rows = 17;
  for (const Shape shape : {Shape{64, 256}, Shape{64, 746}, Shape{96, 64}, Shape{2560, 300}}) {
    const std::vector<float> weights = normal(shape.out * shape.in, 1);
    const std::vector<float> x = normal(max_rows * shape.in, 2);
    Weight w;
    w.w = View{const_cast<float*>(weights.data()), DType::F32, shape.out, shape.in, shape.in};
    for (const bool accumulate : {false, true}) {
      auto one = make_cpu_backend(1, CpuMath::Exact);
      std::vector<std::vector<float>> alone;
      for (int64_t r = 0; r < max_rows; ++r) alone.push_back(product(*one, x, r, 1, w, accumulate));
      for (const int threads : {1, 2, 3}) {
        auto backend = make_cpu_backend(threads, CpuMath::Exact);
        for (const int64_t rows : {1, 2, 3, 5, 8, 16, 17}) {
          const std::vector<float> y = product(*backend, x, max_rows - rows, rows, w, accumulate);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t o = 0; o < shape.out; ++o)
              ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(r * shape.out + o)]),
                        std::bit_cast<uint32_t>(alone[static_cast<size_t>(max_rows - rows + r)][static_cast<size_t>(o)]))
                  << shape.in << " -> " << shape.out << ", " << rows << " rows at " << threads
                  << " threads, accumulate " << accumulate << ": row " << r << " output " << o;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvdice::backend
