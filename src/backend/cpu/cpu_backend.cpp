// The fp32 reference backend: readable loops (a persistent worker pool over rows, heads, sequences and
// output slices: worker_pool.h says why not OpenMP), OpenBLAS for the
// GEMMs, memory in host RAM. Every CUDA op is checked against the op of the same name here. With
// CpuMath::Fast, GGUF weights of the types quant_dot.h reads stay in their blocks and the linear
// layers multiply them with int8-quantised activations, and bf16 / fp16 weights (safetensors or GGUF)
// stay 16-bit and meet fp32 activations (half_dot.h); everything else is fp32 either way.
#include <cblas.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_eviction.h"
#include "backend/cpu/cpu_sampling.h"
#include "backend/cpu/half_dot.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/worker_pool.h"
#include "backend/sampling_rule.h"
#include "core/dtype.h"
#include "core/error.h"
#include "policy/eviction_policy.h"

namespace kvdice::backend {
namespace {

float* f32(const View& v) {
  KVDICE_CHECK(v.dtype == DType::F32, "CPU backend computes in fp32, got a {} view", dtype_name(v.dtype));
  return static_cast<float*>(v.data);
}
float* row(const View& v, int64_t r) { return f32(v) + r * v.ld; }

class CpuBackend final : public Backend {
 public:
  // One thread pool only: OpenBLAS runs single-threaded inside our slices, because two pools on the
  // same cores spin against each other (measured: 2 threads ran slower than 1).
  CpuBackend(int threads, CpuMath math)
      : threads_(threads > 0 ? threads : available_cores()),
        math_(math),
        isa_(cpu::best_isa()),
        half_isa_(cpu::best_half_isa()),
        pool_(threads_) {
    openblas_set_num_threads(1);
  }

  std::string name() const override {
    if (math_ == CpuMath::Exact) return fmt::format("cpu (fp32, {} threads)", threads_);
    return fmt::format(
        "cpu (GGUF blocks x int8 activations, {}; bf16/fp16 weights kept 16-bit, {}; fp32 otherwise; {} threads)",
        cpu::isa_name(isa_), cpu::half_isa_name(half_isa_), threads_);
  }
  std::vector<uint32_t> block_weight_types() const override {
    if (math_ == CpuMath::Exact) return {};
    return {cpu::kQ5_0, cpu::kQ8_0, cpu::kQ4_K, cpu::kQ6_K, cpu::kF16, cpu::kBF16};
  }
  bool is_cpu() const override { return true; }
  DType activation_dtype() const override { return DType::F32; }
  DType weight_dtype() const override { return DType::F32; }
  DType kv_dtype() const override { return DType::F32; }

  Buffer alloc(size_t bytes, const std::string& what) override {
    if (bytes == 0) return Buffer(nullptr, 0, {});
    // Anonymous mappings are zero pages until touched: a large KV pool costs memory only as used.
    void* p =
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      fail("cannot allocate {} ({:.2f} GiB) in host memory: {}", what,
           static_cast<double>(bytes) / (1u << 30), std::strerror(errno));
    }
    return Buffer(p, bytes, [bytes](void* q) { munmap(q, bytes); });
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void fill_zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  void upload_matrix(const View& dst, const float* src) override {
    for (int64_t r = 0; r < dst.rows; ++r) std::copy_n(src + r * dst.cols, dst.cols, row(dst, r));
  }
  void download_matrix(const View& src, float* dst) override {
    for (int64_t r = 0; r < src.rows; ++r) std::copy_n(row(src, r), src.cols, dst + r * src.cols);
  }
  void synchronize() override {}
  MemoryInfo memory() const override {
    const int64_t page = sysconf(_SC_PAGESIZE);
    return {sysconf(_SC_AVPHYS_PAGES) * page, sysconf(_SC_PHYS_PAGES) * page};
  }
  int64_t peak_memory_bytes() const override {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return int64_t{usage.ru_maxrss} * 1024;  // Linux reports KiB
  }
  double measure_copy_bandwidth(size_t bytes, int repeats) override {
    std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched first: page faults are not bandwidth
    double best = 0.0;
    for (int i = 0; i < std::max(repeats, 1); ++i) {
      const auto start = std::chrono::steady_clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (seconds > 0.0) best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds);
      src[static_cast<size_t>(i) % bytes] = static_cast<char>(dst[0] + i);  // not a dead store
    }
    return best;
  }

  void embed(const StepBatch& batch, const View& table, const View& x) override {
    for (int r = 0; r < batch.n_rows; ++r) std::copy_n(row(table, batch.tokens[r]), x.cols, row(x, r));
  }

  void embed_blocks(const StepBatch& batch, const Weight& table, const View& x) override {
    for (int r = 0; r < batch.n_rows; ++r) {
      int64_t token = batch.tokens[r];
      for (const BlockRows& part : table.blocks) {
        if (token < part.rows) {
          const uint8_t* w = part.data + token * part.row_bytes;
          if (cpu::is_half_type(part.ggml_type)) {
            cpu::widen_half_row(part.ggml_type, w, x.cols, row(x, r));
          } else {
            cpu::dequantize_row(part.ggml_type, w, x.cols, row(x, r));
          }
          break;
        }
        token -= part.rows;
      }
    }
  }

  void rmsnorm(const View& x, const View& w, const View& y, float eps) override {
    const int64_t dim = x.cols;
    for_each(x.rows, [&](int64_t r_index) {
      const int64_t r = static_cast<int64_t>(r_index);
      const float* xr = row(x, r);
      float* yr = row(y, r);
      double sum = 0.0;
      for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(sum / dim) + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * f32(w)[i];
    });
  }

  void matmul(const View& x, const Weight& w, const View& y, bool accumulate) override {
    const int rows = static_cast<int>(x.rows), in = static_cast<int>(x.cols),
              out = static_cast<int>(w.w.rows);
    KVDICE_CHECK(w.w.cols == in && y.cols == out && y.rows == rows, "matmul [{}x{}]·[{}x{}]^T into [{}x{}]",
                 rows, in, out, w.w.cols, y.rows, y.cols);
    if (!w.blocks.empty()) {
      matmul_blocks(x, w, y, accumulate);
    } else {
      matmul_f32(x, w, y, accumulate);
    }
    if (!w.bias.empty()) {
      for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) row(y, r)[o] += f32(w.bias)[o];
    }
  }

  // y[r][o] (+)= dot(weight row o, x row r) through OpenBLAS, each x row on its own, as one sgemv per
  // slice of weight rows. The slices are a function of the weight's shape alone (never of the rows or
  // the threads), so a row's outputs come from the same calls on the same numbers whatever its batch:
  // batch-invariant, bit for bit. (One sgemm over the rows rounds a row by the batch: its kernels sum
  // in another order than sgemv's, and in another again past some number of rows.)
  void matmul_f32(const View& x, const Weight& w, const View& y, bool accumulate) {
    const int64_t rows = x.rows, in = x.cols, out = w.w.rows;
    const float beta = accumulate ? 1.0f : 0.0f;
    const int64_t slice = f32_slice_rows(in);
    const int64_t n_slices = (out + slice - 1) / slice;
    for_each(n_slices, [&](int64_t t) {
      const int64_t begin = t * slice, end = std::min(out, begin + slice);
      const float* w_slice = row(w.w, begin);
      for (int64_t r = 0; r < rows; ++r)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(end - begin), static_cast<int>(in), 1.0f,
                    w_slice, static_cast<int>(w.w.ld), row(x, r), 1, beta, row(y, r) + begin, 1);
    });
  }

  // Weight rows of one matmul_f32 slice: about 256 KiB of fp32 weights (a prefill's rows meet the slice
  // in the near caches), at least 1 and at most 64 rows. At 2560 -> 9728 on 2 threads: 128 rows 86-114
  // ms (one sgemm: 69), one row 7.4-9.5 ms (5.6); 64 KiB slices took 210 ms for the 128 rows.
  static int64_t f32_slice_rows(int64_t in) {
    return std::clamp<int64_t>((256 << 10) / std::max<int64_t>(1, 4 * in), 1, 64);
  }

  // y[r][o] (+)= dot(weight row o in its blocks, x row r quantised to int8 blocks of 32). The
  // activations are quantised once per op; each chunk is a contiguous range of output rows, each
  // weight row read once for all x rows: a few x rows (decode) take runs of kRunRows weight rows per x
  // row (the run stays in L1 for the next x row), more take tiles of kTileRows x rows per weight row.
  // Either way a result is bit-identical to the one-row kernel's, so it does not depend on the batch.
  // Parts stored as bf16 / fp16 take the same runs and tiles through half_dot.h's kernels, which read
  // the fp32 activations (or their bf16 rounding, made once per op) instead of the int8 ones.
  void matmul_blocks(const View& x, const Weight& w, const View& y, bool accumulate) {
    const int64_t rows = x.rows, in = x.cols;
    bool any_blocks = false, any_bf16_rows = false;
    for (const BlockRows& b : w.blocks) {
      if (!cpu::is_half_type(b.ggml_type)) any_blocks = true;
      if (cpu::needs_bf16_rows(b.ggml_type, half_isa_)) any_bf16_rows = true;
    }
    if (any_blocks) cpu::quantize_rows(f32(x), rows, in, x.ld, activations_);
    if (any_bf16_rows) cpu::round_rows_to_bf16(f32(x), rows, in, x.ld, bf16_activations_);
    const cpu::HalfRows hx{f32(x), x.ld, any_bf16_rows ? bf16_activations_.data() : nullptr, in};
    struct Part {
      cpu::TileDot tile;
      cpu::RunDot run;
      cpu::HalfDot half;
      const uint8_t* data;
      int64_t begin, end, row_bytes;
    };
    constexpr int kMaxParts = 8;
    KVDICE_CHECK(w.blocks.size() <= kMaxParts, "a weight of {} block parts (at most {})", w.blocks.size(),
                 kMaxParts);
    Part parts[kMaxParts];
    int n_parts = 0;
    int64_t out = 0;
    for (const BlockRows& b : w.blocks) {
      if (cpu::is_half_type(b.ggml_type)) {
        KVDICE_CHECK(b.row_bytes == 2 * in, "16-bit rows of {} bytes for {} columns", b.row_bytes, in);
        parts[n_parts++] = {nullptr, nullptr, cpu::half_dot(b.ggml_type, half_isa_), b.data, out, out + b.rows,
                            b.row_bytes};
      } else {
        KVDICE_CHECK(b.row_bytes == cpu::block_row_bytes(b.ggml_type, in),
                     "block rows of {} bytes for {} columns", b.row_bytes, in);
        parts[n_parts++] = {cpu::tile_dot(b.ggml_type, isa_), cpu::run_dot(b.ggml_type, isa_), nullptr, b.data,
                            out, out + b.rows, b.row_bytes};
      }
      out += b.rows;
    }
    KVDICE_CHECK(out == w.w.rows, "block rows add up to {}, the weight has {}", out, w.w.rows);
    const cpu::QuantizedRows& xq = activations_;
    const bool runs = rows < 4;
    // Chunks of whole runs: a multiple of kRunRows weight rows each.
    const int64_t units = (out + cpu::kRunRows - 1) / cpu::kRunRows;
    const int slices = static_cast<int>(std::min<int64_t>(4 * threads_, std::max<int64_t>(1, out / 64)));
    for_each(slices, [&](int64_t t_index) {
      const int t = static_cast<int>(t_index);
      const int64_t begin = std::min(out, units * t / slices * cpu::kRunRows),
                    end = std::min(out, units * (t + 1) / slices * cpu::kRunRows);
      for (int pi = 0; pi < n_parts; ++pi) {
        const Part& p = parts[pi];
        const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.end);
        if (p.half != nullptr) {
          half_part(p.half, p.data + (lo - p.begin) * p.row_bytes, p.row_bytes, lo, hi, hx, runs, y, accumulate);
          continue;
        }
        if (runs) {
          const uint8_t* stretch_end = p.data + (hi - p.begin) * p.row_bytes;
          for (int64_t o = lo; o < hi; o += cpu::kRunRows) {
            const int n = static_cast<int>(std::min<int64_t>(cpu::kRunRows, hi - o));
            const uint8_t* wr = p.data + (o - p.begin) * p.row_bytes;
            for (int64_t r = 0; r < rows; ++r) {
              float v[cpu::kRunRows];
              p.run(wr, p.row_bytes, n, xq, r, v, stretch_end);
              float* dst = row(y, r) + o;
              for (int j = 0; j < n; ++j) dst[j] = accumulate ? dst[j] + v[j] : v[j];
            }
          }
          continue;
        }
        // A tile of activation rows per weight row (each weight block read once per tile), over a
        // stretch of weight rows that stays in the near caches with the tile's activations: every
        // stretch meets each tile in turn, instead of each weight row meeting every tile (which
        // streamed all the prompt's activations from L2 once per weight row).
        const int64_t stretch = tile_stretch(p.row_bytes);
        for (int64_t o0 = lo; o0 < hi; o0 += stretch) {
          const int64_t o1 = std::min(hi, o0 + stretch);
          for (int64_t r0 = 0; r0 < rows; r0 += cpu::kTileRows) {
            const int n = static_cast<int>(std::min<int64_t>(cpu::kTileRows, rows - r0));
            for (int64_t o = o0; o < o1; ++o) {
              float v[cpu::kTileRows];
              p.tile(p.data + (o - p.begin) * p.row_bytes, xq, r0, n, v);
              for (int i = 0; i < n; ++i) {
                float& dst = row(y, r0 + i)[o];
                dst = accumulate ? dst + v[i] : v[i];
              }
            }
          }
        }
      }
    });
  }

  // Output rows [lo, hi) of a 16-bit part starting at `w`: runs of kRunRows weight rows per activation
  // row for a few rows, else tiles of kTileRows activation rows per weight row (as the block kernels).
  static void half_part(cpu::HalfDot dot, const uint8_t* w, int64_t row_bytes, int64_t lo, int64_t hi,
                        const cpu::HalfRows& hx, bool runs, const View& y, bool accumulate) {
    const int64_t rows = y.rows;
    float v[cpu::kHalfMaxPairs];
    if (runs) {
      for (int64_t o = lo; o < hi; o += cpu::kRunRows) {
        const int n = static_cast<int>(std::min<int64_t>(cpu::kRunRows, hi - o));
        const uint8_t* wr = w + (o - lo) * row_bytes;
        for (int64_t r = 0; r < rows; ++r) {
          dot(wr, row_bytes, n, hx, r, 1, v);
          float* dst = row(y, r) + o;
          for (int j = 0; j < n; ++j) dst[j] = accumulate ? dst[j] + v[j] : v[j];
        }
      }
      return;
    }
    const int64_t stretch = tile_stretch(row_bytes);  // as matmul_blocks' tiles
    for (int64_t o0 = lo; o0 < hi; o0 += stretch) {
      const int64_t o1 = std::min(hi, o0 + stretch);
      for (int64_t r0 = 0; r0 < rows; r0 += cpu::kTileRows) {
        const int n = static_cast<int>(std::min<int64_t>(cpu::kTileRows, rows - r0));
        for (int64_t o = o0; o < o1; ++o) {
          dot(w + (o - lo) * row_bytes, row_bytes, 1, hx, r0, n, v);
          for (int i = 0; i < n; ++i) {
            float& dst = row(y, r0 + i)[o];
            dst = accumulate ? dst + v[i] : v[i];
          }
        }
      }
    }
  }

  // Weight rows of `row_bytes` that prefill's tiles take as one stretch: 32 KiB of weights (at least
  // one row). One thread's CPU time for a long prompt: 8 KiB 12.9-13.1 s, 16 KiB 12.0-12.4, 32 KiB
  // 11.8-12.0, 64 and 128 KiB 11.1-14.1 and 11.5-12.3 (noisier), a stretch per weight row 15.2-16.0.
  static int64_t tile_stretch(int64_t row_bytes) { return std::max<int64_t>(1, (32 << 10) / row_bytes); }

  void qk_norm_rope_append(const StepBatch& batch, const View& qkv, const View& q_norm, const View& k_norm,
                           float eps, const Rope& rope, const KvLayer& kv, const View& q,
                           int n_heads) override {
    const int hd = kv.head_dim, n_kv = kv.n_kv_heads;
    for_each(batch.n_rows, [&](int64_t r_index) {
      const int r = static_cast<int>(r_index);
      const int s = batch.row_seq[r];
      const int i = r - batch.seq_row_begin[s];
      const int32_t position = batch.appended[s] + i;
      const int slot = batch.length[s] + i;
      const float* src = row(qkv, r);
      float* q_out = row(q, r);
      std::copy_n(src, int64_t{n_heads} * hd, q_out);
      thread_local std::vector<float> k;  // a pool thread runs one task at a time
      k.assign(src + int64_t{n_heads} * hd, src + int64_t{n_heads + n_kv} * hd);
      const float* v = src + int64_t{n_heads + n_kv} * hd;
      for (int h = 0; h < n_heads; ++h)
        norm_and_rotate(q_out + int64_t{h} * hd, q_norm, eps, rope, hd, position);
      const int32_t* pages = batch.page_table + int64_t{s} * batch.max_pages;
      const int64_t page = pages[slot / kv.page_slots];
      for (int g = 0; g < n_kv; ++g) {
        norm_and_rotate(k.data() + int64_t{g} * hd, k_norm, eps, rope, hd, position);
        const int64_t index = kv.slot_index(static_cast<int32_t>(page), g, slot % kv.page_slots);
        const float* vg = v + int64_t{g} * hd;
        std::copy_n(k.data() + int64_t{g} * hd, hd, static_cast<float*>(kv.keys) + index * hd);
        std::copy_n(vg, hd, static_cast<float*>(kv.values) + index * hd);
        kv.positions[index] = position;
        if (kv.value_range) {
          const auto [lo, hi] = std::minmax_element(vg, vg + hd);
          kv.value_range[index] = *hi - *lo;
        }
        if (kv.attention_mass) kv.attention_mass[index] = 0.0f;
      }
      // A sequence holding a ring row keeps its last r queries there. Only its last r rows of the
      // step write, so rows r apart in a long prefill chunk never race for one ring slot (the CUDA
      // twin has the same rule).
      const int n_new = batch.seq_row_begin[s + 1] - batch.seq_row_begin[s];
      if (kv.query_ring && batch.ring_row[s] >= 0 && i >= n_new - batch.window[s])
        record_query(kv, batch.ring_row[s], batch.window[s], position, q_out, n_heads);
    });
  }

  // The query ring of backend.h's KvLayer: one slot per position modulo r in the sequence's ring
  // row, all query heads, each element rounded to bf16 as the CUDA twin rounds it.
  static void record_query(const KvLayer& kv, int ring_row, int window, int32_t position, const float* q,
                           int n_heads) {
    KVDICE_CHECK(ring_row < kv.ring_rows && window > 0 && window <= kv.ring_window && n_heads == kv.n_heads,
                 "query ring: row {} of {}, window r={} of a ring {} queries wide, {} query heads of {}",
                 ring_row, kv.ring_rows, window, kv.ring_window, n_heads, kv.n_heads);
    const int hd = kv.head_dim;
    for (int h = 0; h < n_heads; ++h)
      std::transform(q + int64_t{h} * hd, q + int64_t{h + 1} * hd,
                     kv.query_ring + kv.ring_index(ring_row, h, position % window), f32_to_bf16);
  }

  void attention(const StepBatch& batch, const View& q, const KvLayer& kv, const View& out, int n_heads,
                 float scale) override {
    const int hd = kv.head_dim, group = n_heads / kv.n_kv_heads;
    // One task per (row, KV head): the group's queries against the head's visible slots, each key and
    // value read once for the whole group.
    const int n_tasks = batch.n_rows * kv.n_kv_heads;
    for_each(n_tasks, [&](int64_t task_index) {
      const int task = static_cast<int>(task_index);
      const int r = task / kv.n_kv_heads, g = task % kv.n_kv_heads;
      const int s = batch.row_seq[r];
      const int visible = batch.length[s] + (r - batch.seq_row_begin[s]) + 1;
      const int32_t* pages = batch.page_table + int64_t{s} * batch.max_pages;
      thread_local std::vector<float> weights;  // [group][visible]
      group_attention_weights(kv, pages, g, row(q, r) + int64_t{g} * group * hd, group, visible, scale,
                              weights);
      // H2O's signal of a sequence with one row in the step (a decode row): this task is the only one
      // adding into its head's slots, so it adds the weights it has, in accumulate_attention's order.
      if (kv.attention_mass && batch.seq_row_begin[s + 1] - batch.seq_row_begin[s] == 1)
        add_attention_mass(kv, pages, g, group, visible, weights);
      float* o = row(out, r) + int64_t{g} * group * hd;
      std::fill_n(o, int64_t{group} * hd, 0.0f);
      for (int j = 0; j < visible; ++j) {
        const float* vj = static_cast<const float*>(kv.values) +
                          kv.slot_index(pages[j / kv.page_slots], g, j % kv.page_slots) * hd;
        for (int h = 0; h < group; ++h) {
          const float wj = weights[static_cast<size_t>(h) * visible + j];
          float* oi = o + int64_t{h} * hd;
          for (int c = 0; c < hd; ++c) oi[c] += wj * vj[c];
        }
      }
    });
    if (kv.attention_mass) accumulate_attention(batch, q, kv, n_heads, scale);
  }

  // Softmax weights of the `group` consecutive query heads at `q` that share KV head g over its slots
  // [0, visible), into weights[h * visible + j]: each head's dot products summed over the head dimension
  // in order, a multiply then an add per element, with the heads in vector lanes so the sums run side by
  // side and each key is read once.
  static void group_attention_weights(const KvLayer& kv, const int32_t* pages, int g, const float* q,
                                      int group, int visible, float scale, std::vector<float>& weights) {
    using v4 = float __attribute__((vector_size(16)));
    constexpr int kLanes = 4, kMaxChunks = 4;  // up to 16 heads per pass
    const int hd = kv.head_dim;
    weights.resize(static_cast<size_t>(group) * visible);
    thread_local std::vector<v4> qt;  // [chunk][c]: element c of the chunk's heads
    for (int h0 = 0; h0 < group; h0 += kLanes * kMaxChunks) {
      const int heads = std::min(group - h0, kLanes * kMaxChunks), chunks = (heads + kLanes - 1) / kLanes;
      qt.assign(static_cast<size_t>(chunks) * hd, v4{0, 0, 0, 0});
      for (int h = 0; h < heads; ++h)
        for (int c = 0; c < hd; ++c)
          qt[static_cast<size_t>(h / kLanes) * hd + c][h % kLanes] = q[int64_t{h0 + h} * hd + c];
      for (int j = 0; j < visible; ++j) {
        const float* kj = static_cast<const float*>(kv.keys) +
                          kv.slot_index(pages[j / kv.page_slots], g, j % kv.page_slots) * hd;
        v4 dot[kMaxChunks] = {};
        for (int c = 0; c < hd; ++c) {
          const v4 k{kj[c], kj[c], kj[c], kj[c]};
          for (int t = 0; t < chunks; ++t) {
            const v4 product = qt[static_cast<size_t>(t) * hd + c] * k;
            dot[t] = dot[t] + product;
          }
        }
        for (int h = 0; h < heads; ++h)
          weights[static_cast<size_t>(h0 + h) * visible + j] = dot[h / kLanes][h % kLanes] * scale;
      }
    }
    for (int h = 0; h < group; ++h) softmax_in_place(weights.data() + static_cast<size_t>(h) * visible, visible);
  }

  // Scores -> softmax weights: max-shifted exp, the sum in double, one reciprocal (every CPU attention
  // path normalises the same way, so their weights agree bit for bit).
  static void softmax_in_place(float* w, int n) {
    float max_score = -INFINITY;
    for (int j = 0; j < n; ++j) max_score = std::max(max_score, w[j]);
    double denom = 0.0;
    for (int j = 0; j < n; ++j) {
      w[j] = std::exp(w[j] - max_score);
      denom += w[j];
    }
    const float inv = static_cast<float>(1.0 / denom);
    for (int j = 0; j < n; ++j) w[j] *= inv;
  }

  // H2O's signal: every slot's attention_mass grows by the weight each query of the step gives it,
  // summed over the query heads of its KV head, in a fixed order (rows, then heads, then slots), so the
  // sums (and H2O's keep-sets) are the same on every run and thread count. attention() adds a decode
  // row's weights itself; the sequences with several rows take a second pass, one task per (sequence,
  // KV head).
  void accumulate_attention(const StepBatch& batch, const View& q, const KvLayer& kv, int n_heads,
                            float scale) {
    const int hd = kv.head_dim, group = n_heads / kv.n_kv_heads;
    const int n_tasks = batch.n_seqs * kv.n_kv_heads;
    for_each(n_tasks, [&](int64_t task_index) {
      const int task = static_cast<int>(task_index);
      const int s = task / kv.n_kv_heads, g = task % kv.n_kv_heads;
      const int begin = batch.seq_row_begin[s], end = batch.seq_row_begin[s + 1];
      if (end - begin <= 1) return;  // none, or a decode row attention() has added
      const int32_t* pages = batch.page_table + int64_t{s} * batch.max_pages;
      thread_local std::vector<float> weights;  // [group][visible]
      for (int r = begin; r < end; ++r) {
        const int visible = batch.length[s] + (r - begin) + 1;
        group_attention_weights(kv, pages, g, row(q, r) + int64_t{g} * group * hd, group, visible, scale,
                                weights);
        add_attention_mass(kv, pages, g, group, visible, weights);
      }
    });
  }

  // One row's group weights (group_attention_weights) added into KV head g's attention_mass, head by
  // head, each over the slots in order.
  static void add_attention_mass(const KvLayer& kv, const int32_t* pages, int g, int group, int visible,
                                 const std::vector<float>& weights) {
    for (int h = 0; h < group; ++h)
      for (int j = 0; j < visible; ++j)
        kv.attention_mass[kv.slot_index(pages[j / kv.page_slots], g, j % kv.page_slots)] +=
            weights[static_cast<size_t>(h) * visible + j];
  }

  void silu_mul(const View& gate_up, const View& out) override {
    const int64_t n = out.cols;
    for_each(out.rows, [&](int64_t r_index) {
      const int64_t r = static_cast<int64_t>(r_index);
      const float* gate = row(gate_up, r);
      const float* up = gate + n;
      float* o = row(out, r);
      for (int64_t i = 0; i < n; ++i) o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    });
  }

  void gather_last_rows(const StepBatch& batch, const View& x, const View& out) override {
    for (int s = 0; s < batch.n_seqs; ++s)
      std::copy_n(row(x, batch.seq_row_begin[s + 1] - 1), x.cols, row(out, s));
  }

  void advance(const StepBatch& batch) override {
    for (int s = 0; s < batch.n_seqs; ++s) {
      const int n_new = batch.seq_row_begin[s + 1] - batch.seq_row_begin[s];
      batch.length[s] += n_new;
      batch.appended[s] += n_new;
    }
  }

  void sample(const StepBatch& batch, const View& logits) override {
    const int vocab = static_cast<int>(logits.cols);
    for_each(batch.n_seqs, [&](int64_t s_index) {
      const int s = static_cast<int>(s_index);
      const float* l = row(logits, s);
      if (!std::all_of(l, l + vocab, [](float v) { return std::isfinite(v); })) {
        batch.next_token[s] = kNonFiniteLogits;
      } else if (batch.forced[s] >= 0) {
        const ForcedScore score = score_forced_reference(l, vocab, batch.forced[s]);
        batch.forced_logprob[s] = score.logprob;
        batch.forced_is_argmax[s] = score.is_argmax ? 1 : 0;
        batch.next_token[s] = batch.forced[s];
      } else {
        thread_local cpu::SamplingScratch scratch;  // a pool thread runs one task at a time
        batch.next_token[s] =
            cpu::sample_tokens(l, vocab, batch.temperature[s], batch.top_k[s], batch.top_p[s],
                               batch.sample_key[s], static_cast<uint32_t>(batch.gen_step[s]), scratch);
      }
      batch.gen_step[s] += 1;
    });
  }

  void evict(const StepBatch& batch, const std::vector<KvLayer>& layers, const policy::EvictionPolicy& policy,
             int policy_id) override {
    for (int s = 0; s < batch.n_seqs; ++s) {
      const int len = batch.length[s], budget = batch.budget[s], window = batch.window[s];
      if (batch.policy_id[s] != policy_id || budget <= 0 || len <= budget || len % window != 0) continue;
      const HostSequencePages pages{&layers, batch.page_table + int64_t{s} * batch.max_pages, len,
                                    batch.appended[s], batch.ring_row != nullptr ? batch.ring_row[s] : -1};
      RoundParams params{budget, window, batch.n_protected[s], batch.evict_key[s],
                         static_cast<uint32_t>(batch.round[s])};
      evict_sequence_host(pages, params, policy);
      batch.length[s] = budget;
      batch.round[s] += 1;
    }
  }

 private:
  // Per-head RMSNorm (when `norm` is given) then rotate-half RoPE of one head vector at `position`.
  static void norm_and_rotate(float* v, const View& norm, float eps, const Rope& rope, int hd,
                              int32_t position) {
    if (!norm.empty()) {
      double sum = 0.0;
      for (int i = 0; i < hd; ++i) sum += static_cast<double>(v[i]) * v[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(sum / hd) + eps);
      for (int i = 0; i < hd; ++i) v[i] = v[i] * inv * f32(norm)[i];
    }
    const int half = rope.rotary_dim / 2;
    for (int i = 0; i < half; ++i) {
      // Angles in double so large absolute positions keep fp32-level accuracy like HF's fp32 path.
      const double angle = static_cast<double>(position) * static_cast<double>(rope.inv_freq[i]);
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }

  // The cores this process may run on (its affinity mask).
  static int available_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
    return std::max(1, CPU_COUNT(&set));
  }

  // fn(i) for i in [0, n) on the pool, in contiguous ranges.
  template <class Fn>
  void for_each(int64_t n, Fn&& fn) {
    pool_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fn(i);
    });
  }

  int threads_;
  CpuMath math_;
  cpu::Isa isa_;
  cpu::HalfIsa half_isa_;
  cpu::WorkerPool pool_;
  cpu::QuantizedRows activations_;  // scratch of matmul_blocks, kept to avoid an allocation per op
  std::vector<uint16_t> bf16_activations_;  // the same for 16-bit weights read with bf16 products
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads, CpuMath math) {
  if (threads < 0 || threads > kMaxCpuThreads)
    fail("--threads must be in [0, {}] (0 = all cores), got {}", kMaxCpuThreads, threads);
  return std::make_unique<CpuBackend>(threads, math);
}

}  // namespace kvdice::backend
