// CudaBackend: the bf16 CUDA backend. One device, one non-blocking stream owned by the backend; every
// op validates its views on the host (shapes and dtypes only, never device data) and enqueues kernels
// on the stream, so a decode step needs no host round trip and can be captured in a CUDA graph once
// its scratch has grown to size. download() and synchronize() wait for the stream and raise errors the
// eviction kernels flagged on the device. Kernels live in the .cu files named by cuda_kernels.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"
#include "policy/cuda_selection.h"
#include "policy/eviction_policy.h"

namespace kvdice::backend {
namespace {

using cuda::DeviceKvLayer;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Keep-flag scratch of one evict launch; layers are processed in chunks that fit.
constexpr size_t kKeepScratchBytes = size_t{64} << 20;
// Score scratch of one evict launch of a scoring policy (sort buffers and fp64 per-candidate arrays).
constexpr size_t kScoreScratchBytes = size_t{512} << 20;
// The decode attention's logits for H2O's signal (batch 128 of Qwen3-4B at 2k slots: 34 MB); a step that
// needs more takes the mass kernels that read the keys again.
constexpr size_t kMaxMassLogitBytes = size_t{256} << 20;

// Whether a decode step's attention mass may come from the decode attention's logits (where that kernel
// takes the step): they fit kMaxMassLogitBytes.
bool mass_logits_fit(const StepBatch& batch, const KvLayer& kv, int n_heads) {
  return cuda::attention_mass_logits_bytes(batch, kv, n_heads) <= kMaxMassLogitBytes;
}

void require_dtype(const View& v, DType dtype, const char* op, const char* what) {
  if (v.dtype != dtype)
    fail("CUDA {}: {} must be {}, got {}", op, what, dtype_name(dtype), dtype_name(v.dtype));
}

// Device scratch that only grows (reallocated outside the hot path, after the stream drains). A
// recorded graph bakes in the addresses it was recorded with, so a reallocation drops every graph.
struct Scratch {
  void* data = nullptr;
  size_t bytes = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count) fail("--device {}: this machine has {} CUDA device(s)", device, count);
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaGetDeviceProperties(&properties_, device_));
    if (properties_.major < 8) {
      fail("CUDA device {} ({}) has compute capability {}.{}; kvdice needs bf16 tensor cores (8.0 or newer)",
           device_, properties_.name, properties_.major, properties_.minor);
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&error_host_), sizeof(int), cudaHostAllocMapped));
    *error_host_ = 0;
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&error_device_), error_host_, 0));
    gemm_ = std::make_unique<cuda::LtGemm>();
    for (cudaEvent_t& e : ticket_events_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    gemm_.reset();
    layer_tables_.clear();
    params_.clear();  // device tables, freed while the device is current
    for (Scratch* s : {&attention_scratch_, &split_counters_, &mass_scratch_, &mass_logits_, &sample_scratch_,
                       &keep_scratch_, &score_scratch_, &round_keep_scratch_})
      if (s->data != nullptr) cudaFree(s->data);
    for (cudaEvent_t e : ticket_events_)
      if (e != nullptr) cudaEventDestroy(e);
    if (error_host_ != nullptr) cudaFreeHost(error_host_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string kernel_choices() const override { return gemm_->describe(); }
  cudaStream_t stream() const { return stream_; }

  std::string name() const override {
    return fmt::format("cuda (bf16, device {}: {}, {} SMs)", device_, properties_.name,
                       properties_.multiProcessorCount);
  }
  bool is_cpu() const override { return false; }
  DType activation_dtype() const override { return DType::BF16; }
  DType weight_dtype() const override { return DType::BF16; }
  DType kv_dtype() const override { return DType::BF16; }

  // ---- memory ----------------------------------------------------------------------------------
  Buffer alloc(size_t bytes, const std::string& what) override {
    if (bytes == 0) return Buffer(nullptr, 0, {});
    CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // out of memory is not sticky: clear it so later calls succeed
      const MemoryInfo info = memory();
      fail("cannot allocate {} ({:.2f} GiB) on CUDA device {} ({}): {:.2f} GiB free of {:.2f} GiB", what,
           static_cast<double>(bytes) / kGiB, device_, properties_.name,
           static_cast<double>(info.free_bytes) / kGiB, static_cast<double>(info.total_bytes) / kGiB);
    }
    CUDA_CHECK(status);
    note_memory_use();
    const int device = device_;
    return Buffer(p, bytes, [device](void* q) {
      cudaSetDevice(device);
      cudaFree(q);  // implicitly waits for work using q; errors here cannot be reported
    });
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    // From pageable memory the call returns once `src` is staged, so the caller may reuse it.
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }

  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }

  Buffer alloc_host(size_t bytes, const std::string& what) override {
    void* p = nullptr;
    // Mapped: store_to_host's kernel writes it (unified addressing: the device uses the same pointer).
    const cudaError_t status = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocMapped);
    if (status != cudaSuccess)
      fail("cannot allocate {} bytes of pinned host memory for {}: {}", bytes, what, cudaGetErrorString(status));
    const int device = device_;
    return Buffer(p, bytes, [device](void* q) {
      cudaSetDevice(device);
      cudaFreeHost(q);  // waits for copies into it
    });
  }

  void store_to_host(int32_t* host_dst, const int32_t* src, int words) override {
    cuda::launch_store_words(src, host_dst, words, stream_);
  }

  uint64_t mark() override {
    const uint64_t ticket = next_ticket_++;
    CUDA_CHECK(cudaEventRecord(ticket_events_[ticket % kTicketEvents], stream_));
    return ticket;
  }

  void wait(uint64_t ticket) override {
    // An event is reused kTicketEvents tickets later: an older ticket can no longer be told apart.
    KVDICE_CHECK(ticket < next_ticket_ && next_ticket_ - ticket <= kTicketEvents,
                 "wait: ticket {} is not among the last {} (next {})", ticket, kTicketEvents, next_ticket_);
    CUDA_CHECK(cudaEventSynchronize(ticket_events_[ticket % kTicketEvents]));
  }

  void fill_zero(void* dst, size_t bytes) override {
    if (bytes != 0) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

  void upload_matrix(const View& dst, const float* src) override {
    if (dst.rows == 0 || dst.cols == 0) return;
    const size_t elem = dtype_size(dst.dtype);
    const int64_t n = dst.rows * dst.cols;
    // Staged without zero-filling and converted on every core: a 4B-parameter model is 4G elements,
    // which one thread took seconds to convert on the GPU machine (every call pays it).
    std::unique_ptr<unsigned char[]> staged(new unsigned char[static_cast<size_t>(n) * elem]);
    switch (dst.dtype) {
      case DType::F32: {
        auto* out = reinterpret_cast<float*>(staged.get());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = src[i];
        break;
      }
      case DType::BF16: {
        auto* out = reinterpret_cast<uint16_t*>(staged.get());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
        break;
      }
      default:
        fail("CUDA upload_matrix: unsupported dtype {}", dtype_name(dst.dtype));
    }
    CUDA_CHECK(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.ld) * elem, staged.get(),
                                 static_cast<size_t>(dst.cols) * elem, static_cast<size_t>(dst.cols) * elem,
                                 static_cast<size_t>(dst.rows), cudaMemcpyHostToDevice, stream_));
    synchronize();  // `staged` dies here
  }

  void download_matrix(const View& src, float* dst) override {
    if (src.rows == 0 || src.cols == 0) return;
    const size_t elem = dtype_size(src.dtype);
    const size_t n = static_cast<size_t>(src.rows * src.cols);
    std::vector<unsigned char> staged(n * elem);
    CUDA_CHECK(cudaMemcpy2DAsync(staged.data(), static_cast<size_t>(src.cols) * elem, src.data,
                                 static_cast<size_t>(src.ld) * elem, static_cast<size_t>(src.cols) * elem,
                                 static_cast<size_t>(src.rows), cudaMemcpyDeviceToHost, stream_));
    synchronize();
    switch (src.dtype) {
      case DType::F32:
        std::memcpy(dst, staged.data(), n * sizeof(float));
        break;
      case DType::BF16: {
        const auto* in = reinterpret_cast<const uint16_t*>(staged.data());
        for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(in[i]);
        break;
      }
      default:
        fail("CUDA download_matrix: unsupported dtype {}", dtype_name(src.dtype));
    }
  }

  void synchronize() override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const int code = *error_host_;
    if (code != 0) {
      *error_host_ = 0;
      if (code == policy::kErrorSelectionInput)
        fail(
            "CUDA evict on device {}: a due row's budget, window, protected prompt or length was outside the "
            "policy's preconditions (need n_protected <= T - r <= length - r and length <= max_pages * "
            "page_slots; a policy reading window queries also needs a query ring row and r <= the ring's "
            "window)",
            device_);
      if (code == policy::kErrorLayersDiffer)
        fail(
            "CUDA evict on device {}: a policy with one keep-set for all layers (triattention) found layers "
            "holding different tokens in the same slots",
            device_);
      fail("CUDA evict on device {}: a policy's keep flags did not hold exactly T slots (error code {})",
           device_, code);
    }
  }

  MemoryInfo memory() const override {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
  }

  int64_t peak_memory_bytes() const override {
    note_memory_use();
    return peak_used_bytes_;
  }

  double measure_copy_bandwidth(size_t bytes, int repeats) override {
    bytes = std::max(bytes, size_t{1} << 30);  // smaller copies do not reach the HBM's steady state
    Buffer src = alloc(bytes, "bandwidth probe source"), dst = alloc(bytes, "bandwidth probe target");
    fill_zero(src.data(), bytes);
    cudaEvent_t start = nullptr, stop = nullptr;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    double best = 0.0;
    for (int i = 0; i <= std::max(repeats, 1); ++i) {  // the first copy is a warm-up
      CUDA_CHECK(cudaEventRecord(start, stream_));
      CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream_));
      CUDA_CHECK(cudaEventRecord(stop, stream_));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i > 0 && ms > 0.0f) best = std::max(best, 2.0 * static_cast<double>(bytes) / (ms * 1e-3));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return best;
  }

  // ---- ops --------------------------------------------------------------------------------------
  void embed(const StepBatch& batch, const View& table, const View& x) override {
    require_dtype(x, DType::F32, "embed", "x");
    if (table.dtype != DType::BF16 && table.dtype != DType::F32)
      fail("CUDA embed: table must be bf16 or f32, got {}", dtype_name(table.dtype));
    KVDICE_CHECK(table.cols == x.cols && x.rows >= batch.n_rows,
                 "embed: table [{}x{}] into x [{}x{}] for {} rows", table.rows, table.cols, x.rows, x.cols,
                 batch.n_rows);
    cuda::launch_embed(batch, table, x, stream_);
  }

  void rmsnorm(const View& x, const View& w, const View& y, float eps) override {
    require_dtype(x, DType::F32, "rmsnorm", "x");
    require_dtype(w, DType::F32, "rmsnorm", "weight");
    if (y.dtype != DType::F32 && y.dtype != DType::BF16)
      fail("CUDA rmsnorm: y must be f32 or bf16, got {}", dtype_name(y.dtype));
    KVDICE_CHECK(x.rows == y.rows && x.cols == y.cols && w.cols * w.rows == x.cols,
                 "rmsnorm [{}x{}] -> [{}x{}]", x.rows, x.cols, y.rows, y.cols);
    cuda::launch_rmsnorm(x, w, y, eps, stream_);
  }

  void matmul(const View& x, const Weight& w, const View& y, bool accumulate) override {
    require_dtype(x, DType::BF16, "matmul", "x");
    require_dtype(w.w, DType::BF16, "matmul", "weight");
    require_dtype(y, DType::F32, "matmul", "y");
    KVDICE_CHECK(w.w.cols == x.cols && y.cols == w.w.rows && y.rows == x.rows,
                 "matmul [{}x{}]·[{}x{}]^T into [{}x{}]", x.rows, x.cols, w.w.rows, w.w.cols, y.rows, y.cols);
    if (cuda::gemv_supports(x, w.w, y)) {
      cuda::launch_gemv(x, w.w, y, accumulate, stream_);
    } else {
      gemm_->run(x, w.w, y, accumulate, stream_);
    }
    add_bias(w, y);
  }

  // One row on a small weight: the norm inside the matmul's CTAs (gemv_norm.cu), h unwritten. Otherwise
  // the composition (a norm weight off 16-byte alignment too).
  void rmsnorm_matmul(const View& x, const View& norm, float eps, const View& h, const Weight& w,
                      const View& y) override {
    if (h.dtype != DType::BF16 || !cuda::gemv_norm_supports(x, norm, w.w, y))
      return Backend::rmsnorm_matmul(x, norm, eps, h, w, y);
    KVDICE_CHECK(norm.rows * norm.cols == x.cols && h.rows == x.rows && h.cols == x.cols && w.w.cols == x.cols &&
                     y.cols == w.w.rows,
                 "rmsnorm_matmul [{}x{}] (norm of {}) · [{}x{}]^T into [{}x{}]", x.rows, x.cols,
                 norm.rows * norm.cols, w.w.rows, w.w.cols, y.rows, y.cols);
    cuda::launch_gemv_norm(x, norm, eps, w.w, y, stream_);
    add_bias(w, y);
  }

  void qk_norm_rope_append(const StepBatch& batch, const View& qkv, const View& q_norm, const View& k_norm,
                           float eps, const Rope& rope, const KvLayer& kv, const View& q,
                           int n_heads) override {
    require_dtype(qkv, DType::F32, "qk_norm_rope_append", "qkv");
    if (!q_norm.empty()) require_dtype(q_norm, DType::F32, "qk_norm_rope_append", "q_norm");
    if (!k_norm.empty()) require_dtype(k_norm, DType::F32, "qk_norm_rope_append", "k_norm");
    if (q.dtype != DType::BF16 && q.dtype != DType::F32)
      fail("CUDA qk_norm_rope_append: q must be bf16 or f32, got {}", dtype_name(q.dtype));
    if (kv.dtype != DType::BF16 && kv.dtype != DType::F32)
      fail("CUDA qk_norm_rope_append: KV pool must be bf16 or f32, got {}", dtype_name(kv.dtype));
    if (kv.head_dim > cuda::kRopeMaxHeadDim || rope.rotary_dim > kv.head_dim || rope.rotary_dim % 2 != 0)
      fail("CUDA qk_norm_rope_append: head_dim {} (at most {}) with rotary_dim {}", kv.head_dim,
           cuda::kRopeMaxHeadDim, rope.rotary_dim);
    KVDICE_CHECK(qkv.cols == int64_t{n_heads + 2 * kv.n_kv_heads} * kv.head_dim &&
                     q.cols == int64_t{n_heads} * kv.head_dim,
                 "qk_norm_rope_append: qkv has {} columns, q {}, for {} q heads and {} KV heads of dim {}",
                 qkv.cols, q.cols, n_heads, kv.n_kv_heads, kv.head_dim);
    cuda::launch_qk_norm_rope_append(batch, qkv, q_norm, k_norm, eps, rope, kv, q, n_heads, stream_);
  }

  void rope_attention(const StepBatch& batch, const View& qkv, const View& q_norm, const View& k_norm,
                      float eps, const Rope& rope, const KvLayer& kv, const View& q, const View& out,
                      int n_heads, float scale) override {
    // Fused where the decode kernel takes the step: it records the rope op's signals itself (the query
    // ring, one row per query head, and the appended slot's value range), and the attention mass comes
    // from its own logits where they fit (run_attention). The two ops otherwise.
    const bool norms_f32 =
        (q_norm.empty() || q_norm.dtype == DType::F32) && (k_norm.empty() || k_norm.dtype == DType::F32);
    const cuda::AttentionPlan plan = cuda::attention_plan(batch, kv, properties_.multiProcessorCount);
    const bool mass_from_logits = kv.attention_mass == nullptr || mass_logits_fit(batch, kv, n_heads);
    const bool fusable = (kv.query_ring == nullptr || kv.n_heads == n_heads) && mass_from_logits && norms_f32 &&
                         qkv.dtype == DType::F32 &&
                         q.dtype == DType::BF16 && kv.dtype == DType::BF16 && kv.n_kv_heads > 0 &&
                         n_heads % kv.n_kv_heads == 0 && rope.rotary_dim % 2 == 0 &&
                         rope.rotary_dim <= kv.head_dim &&
                         qkv.cols == int64_t{n_heads + 2 * kv.n_kv_heads} * kv.head_dim &&
                         cuda::decode_attention_supports(batch, q.data, q.ld, kv.head_dim,
                                                         n_heads / kv.n_kv_heads, kv.page_slots, plan.n_splits);
    if (!fusable) {
      Backend::rope_attention(batch, qkv, q_norm, k_norm, eps, rope, kv, q, out, n_heads, scale);
      return;
    }
    cuda::DecodeRope fused;
    fused.qkv = qkv.as<const float>();
    fused.qkv_ld = qkv.ld;
    fused.q_norm = q_norm.empty() ? nullptr : q_norm.as<const float>();
    fused.k_norm = k_norm.empty() ? nullptr : k_norm.as<const float>();
    fused.eps = eps;
    fused.inv_freq = rope.inv_freq;
    fused.rotary_dim = rope.rotary_dim;
    fused.positions = kv.positions;
    fused.attention_mass = kv.attention_mass;
    fused.query_ring = kv.query_ring;
    fused.ring_rows = kv.ring_rows;
    fused.ring_window = kv.ring_window;
    fused.value_range = kv.value_range;
    run_attention(batch, q, kv, out, n_heads, scale, plan, &fused);
  }

  void attention(const StepBatch& batch, const View& q, const KvLayer& kv, const View& out, int n_heads,
                 float scale) override {
    run_attention(batch, q, kv, out, n_heads, scale,
                  cuda::attention_plan(batch, kv, properties_.multiProcessorCount), nullptr);
  }

  void silu_mul(const View& gate_up, const View& out) override {
    require_dtype(gate_up, DType::F32, "silu_mul", "gate_up");
    if (out.dtype != DType::BF16 && out.dtype != DType::F32)
      fail("CUDA silu_mul: out must be bf16 or f32, got {}", dtype_name(out.dtype));
    KVDICE_CHECK(gate_up.cols == 2 * out.cols && gate_up.rows == out.rows, "silu_mul [{}x{}] -> [{}x{}]",
                 gate_up.rows, gate_up.cols, out.rows, out.cols);
    cuda::launch_silu_mul(gate_up, out, stream_);
  }

  void gather_last_rows(const StepBatch& batch, const View& x, const View& out) override {
    KVDICE_CHECK(x.dtype == out.dtype && x.cols == out.cols && out.rows >= batch.n_seqs,
                 "gather_last_rows [{}x{}] {} -> [{}x{}] {}", x.rows, x.cols, dtype_name(x.dtype), out.rows,
                 out.cols, dtype_name(out.dtype));
    cuda::launch_gather_last_rows(batch, x, out, stream_);
  }

  void advance(const StepBatch& batch) override { cuda::launch_advance(batch, stream_); }

  void sample(const StepBatch& batch, const View& logits) override {
    require_dtype(logits, DType::F32, "sample", "logits");
    KVDICE_CHECK(logits.rows >= batch.n_seqs && logits.cols > 0,
                 "sample: logits [{}x{}] for {} sequences", logits.rows, logits.cols, batch.n_seqs);
    KVDICE_CHECK(logits.cols <= cuda::kMaxSampleVocab,
                 "sample: a vocabulary of {} tokens exceeds the CUDA sampler's {}", logits.cols,
                 cuda::kMaxSampleVocab);
    void* scratch =
        grow(sample_scratch_, cuda::sample_scratch_bytes(batch.n_seqs, logits.cols), "sampling weights");
    cuda::launch_sample(batch, logits, scratch, stream_);
  }

  void check_policy(const policy::EvictionPolicy& policy) const override {
    policy::require_cuda_selection(policy.name());
  }

  void evict(const StepBatch& batch, const std::vector<KvLayer>& layers, const policy::EvictionPolicy& policy,
             int policy_id) override {
    if (!policy.evicts() || batch.n_seqs == 0 || layers.empty()) return;
    const policy::CudaSelection* cuda = policy::cuda_selection(policy.name());
    if (cuda == nullptr) policy::require_cuda_selection(policy.name());  // throws naming the policy
    const KvLayer& first = layers.front();
    for (const KvLayer& layer : layers) {
      KVDICE_CHECK(layer.n_kv_heads == first.n_kv_heads && layer.head_dim == first.head_dim &&
                       layer.page_slots == first.page_slots && layer.dtype == first.dtype,
                   "evict: layers of different shapes");
    }
    const int row_bytes = first.head_dim * static_cast<int>(dtype_size(first.dtype));
    if (row_bytes % 16 != 0) fail("CUDA evict: K/V rows of {} bytes are not a multiple of 16", row_bytes);
    const int n_layers = static_cast<int>(layers.size());
    const auto* table = upload_layer_table(layers);

    const int capacity = batch.max_pages * first.page_slots;
    const size_t per_layer =
        static_cast<size_t>(batch.n_seqs) * first.n_kv_heads * static_cast<size_t>(capacity);
    int chunk = static_cast<int>(std::clamp<size_t>(kKeepScratchBytes / std::max<size_t>(per_layer, 1), 1,
                                                    static_cast<size_t>(n_layers)));
    // Scoring policies: signals, statistics table and per-head scratch.
    const policy::CudaRoundScorer round_scorer = cuda->round;
    const policy::SignalNeeds needs = policy.needs();
    const bool reads_pool = needs.any() || round_scorer != nullptr;
    const CachedParams* params = &cuda_params(policy);
    const bool scoring = reads_pool || cuda->head_scratch;
    int n_heads = first.n_heads;
    // Scoring scratch is per (row, layer, KV head): rows go in groups so one group's scratch for a chunk
    // of layers stays under kScoreScratchBytes (one row and one layer at least).
    int64_t head_scratch = 0, round_scratch = 0;
    int logit_queries = 0;
    int group_rows = batch.n_seqs, round_rows = batch.n_seqs;
    if (scoring) {
      if (reads_pool) check_scoring_inputs(layers, policy, needs, *params);
      if (params->shape.heads > 0) n_heads = params->shape.heads;
      head_scratch = policy::cuda_head_scratch_bytes(capacity);
      // Windowed-attention policies (their CUDA file answers CudaSelection::window_fp32: snapkv, rkv,
      // vase) also keep per-query-head means, tile statistics and, when one row and layer of them fits a
      // quarter of the cap (a launch still spans >= 4 row-layers), the logits of up to
      // kCudaStoredLogitQueries window queries; rkv_official reads the window queries itself and keeps
      // none of it (with it, a batch-128 round ran in launches of 28 row-layers instead of 1,024).
      const bool windowed = needs.window_queries && cuda->window_fp32 != nullptr;
      const bool window_fp32 = windowed && cuda->window_fp32(params->params);
      if (window_fp32) {
        // The tensor-core path keeps only the fp32 means.
        head_scratch += policy::cuda_window_fp32_bytes(capacity, n_heads / first.n_kv_heads);
      } else if (windowed) {
        const int group = n_heads / first.n_kv_heads;
        const int64_t stored = policy::cuda_window_scratch_bytes(capacity, group, policy::kCudaStoredLogitQueries);
        if (static_cast<size_t>(first.n_kv_heads) * (head_scratch + stored) <= kScoreScratchBytes / 4) {
          logit_queries = policy::kCudaStoredLogitQueries;
          head_scratch += stored;
        } else {
          head_scratch += policy::cuda_window_scratch_bytes(capacity, group, 0);
        }
      }
      if (cuda->extra_scratch != nullptr) {
        KVDICE_CHECK(!windowed, "a CUDA file with extra scratch runs no windowed attention");
        head_scratch += cuda->extra_scratch(params->params, capacity, first.ring_window);
      }
      const size_t per_row_layer = static_cast<size_t>(first.n_kv_heads) * head_scratch;
      chunk = std::min(
          chunk, static_cast<int>(std::clamp<size_t>(kScoreScratchBytes / (per_row_layer * batch.n_seqs), 1,
                                                     static_cast<size_t>(n_layers))));
      group_rows = static_cast<int>(std::clamp<size_t>(kScoreScratchBytes / (per_row_layer * chunk), 1,
                                                       static_cast<size_t>(batch.n_seqs)));
      if (round_scorer != nullptr) {
        round_scratch = policy::cuda_round_scratch_bytes(capacity, n_heads / first.n_kv_heads);
        round_rows = static_cast<int>(
            std::clamp<size_t>(kScoreScratchBytes / (static_cast<size_t>(first.n_kv_heads) * round_scratch),
                               1, static_cast<size_t>(batch.n_seqs)));
      }
    }
    auto* keep = static_cast<uint8_t*>(grow(keep_scratch_, per_layer * chunk, "eviction keep flags"));

    policy::CudaSelectionArgs args;
    args.layers = table->selection;
    args.n_model_layers = n_layers;
    args.head_dim = first.head_dim;
    args.n_heads = n_heads;
    args.params = params->params;  // the policy's options in its CUDA file's own type
    args.table = static_cast<const double*>(params->table.data());
    args.logit_queries = logit_queries;
    args.ring_window = needs.window_queries ? first.ring_window : 0;
    if (scoring) {
      const size_t selection_bytes =
          static_cast<size_t>(group_rows) * chunk * first.n_kv_heads * head_scratch;
      const size_t round_bytes = static_cast<size_t>(round_rows) * first.n_kv_heads * round_scratch;
      args.scratch = static_cast<char*>(
          grow(score_scratch_, std::max(selection_bytes, round_bytes), "eviction score scratch"));
      if (round_scorer != nullptr) {
        args.round_keep = static_cast<uint8_t*>(
            grow(round_keep_scratch_, static_cast<size_t>(batch.n_seqs) * first.n_kv_heads * capacity,
                 "eviction round flags"));
      }
    }
    args.batch = batch;
    args.positions = table->positions;
    args.n_kv_heads = first.n_kv_heads;
    args.page_slots = first.page_slots;
    args.policy_id = policy_id;
    args.keep = keep;
    args.capacity = capacity;
    args.error = error_device_;
    args.n_rows = batch.n_seqs;
    if (round_scorer != nullptr) {
      // Whole-model keep-sets: every layer is scored before any is compacted.
      args.layer_begin = 0;
      args.n_layers = n_layers;
      args.head_scratch = round_scratch;
      for (int row = 0; row < batch.n_seqs; row += round_rows) {
        args.row_begin = row;
        args.n_rows = std::min(round_rows, batch.n_seqs - row);
        round_scorer(args, stream_);
      }
    }
    args.head_scratch = head_scratch;
    for (int begin = 0; begin < n_layers; begin += chunk) {
      args.layer_begin = begin;
      args.n_layers = std::min(chunk, n_layers - begin);
      for (int row = 0; row < batch.n_seqs; row += group_rows) {
        args.row_begin = row;
        args.n_rows = std::min(group_rows, batch.n_seqs - row);
        cuda->select(args, stream_);
      }
      cuda::launch_compaction(batch, table->layers, begin, args.n_layers, first.n_kv_heads, first.page_slots,
                              row_bytes, policy_id, keep, capacity, error_device_, stream_);
    }
    cuda::launch_finish_eviction(batch, policy_id, stream_);
  }

  bool begin_capture() override {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    return true;
  }

  void end_capture(const void* owner, uint64_t key) override {
    cudaGraph_t graph = nullptr;
    capturing_ = false;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(status);
    if (auto it = graphs_.find({owner, key}); it != graphs_.end()) cudaGraphExecDestroy(it->second);
    graphs_[{owner, key}] = exec;
  }

  bool replay(const void* owner, uint64_t key) override {
    const auto it = graphs_.find({owner, key});
    if (it == graphs_.end()) return false;
    CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    return true;
  }

  int64_t graphs_dropped() const override { return graphs_dropped_; }

  void drop_graphs(const void* owner) override {
    for (auto it = graphs_.begin(); it != graphs_.end();) {
      if (it->first.first == owner) {
        cudaGraphExecDestroy(it->second);
        it = graphs_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  // attention as `plan` (cuda::attention_plan of the step) says, or with `rope` the fused form of
  // rope_attention.
  void run_attention(const StepBatch& batch, const View& q, const KvLayer& kv, const View& out, int n_heads,
                     float scale, const cuda::AttentionPlan& plan, const cuda::DecodeRope* rope) {
    require_dtype(q, DType::BF16, "attention", "q");
    require_dtype(out, DType::BF16, "attention", "out");
    if (kv.dtype != DType::BF16) fail("CUDA attention: KV pool must be bf16, got {}", dtype_name(kv.dtype));
    if (!cuda::attention_supports_head_dim(kv.head_dim))
      fail("CUDA attention: head_dim {} is not supported (16, 32, 64, 128 or 256)", kv.head_dim);
    if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0)
      fail("CUDA attention: {} query heads do not split into {} KV heads", n_heads, kv.n_kv_heads);
    const int group = n_heads / kv.n_kv_heads;
    if (group > cuda::attention_max_group(kv.head_dim))
      fail("CUDA attention: GQA group of {} query heads per KV head exceeds {} at head_dim {}", group,
           cuda::attention_max_group(kv.head_dim), kv.head_dim);
    KVDICE_CHECK(q.cols == int64_t{n_heads} * kv.head_dim && out.cols == q.cols,
                 "attention: q [{}x{}] out [{}x{}]", q.rows, q.cols, out.rows, out.cols);
    void* scratch = grow(attention_scratch_, cuda::attention_scratch_bytes(batch, kv, n_heads, plan.n_splits),
                         "attention split partials");
    // The counters live in a buffer of their own: partials of another shape never overwrite them.
    int* split_counters = static_cast<int*>(
        grow(split_counters_, sizeof(int) * static_cast<size_t>(batch.n_seqs) * kv.n_kv_heads,
             "attention split counters"));
    // H2O's signal, only when the pool records it (the running policy asks for attention mass): from the
    // logits the decode kernel writes beside its output where it runs and they fit kMaxMassLogitBytes,
    // else by the mass kernels reading the keys again.
    float* mass_logits = nullptr;
    if (kv.attention_mass != nullptr) {
      if (!cuda::attention_mass_supports(kv.head_dim, group))
        fail("CUDA attention: attention mass takes head_dim a multiple of 8 up to 256 and GQA groups up to 16, "
             "got {} and {}",
             kv.head_dim, group);
      if (mass_logits_fit(batch, kv, n_heads) &&
          cuda::decode_attention_supports(batch, q.data, q.ld, kv.head_dim, group, kv.page_slots, plan.n_splits))
        mass_logits = static_cast<float*>(
            grow(mass_logits_, cuda::attention_mass_logits_bytes(batch, kv, n_heads), "attention mass logits"));
    }
    const bool mass_added = cuda::launch_attention(batch, q, kv, out, n_heads, scale, plan, scratch,
                                                   split_counters, stream_, rope, mass_logits);
    if (mass_logits != nullptr) {
      if (!mass_added) cuda::launch_attention_mass_from_logits(batch, kv, n_heads, mass_logits, plan.wide, stream_);
    } else if (kv.attention_mass != nullptr) {
      void* mass_scratch = grow(mass_scratch_, cuda::attention_mass_scratch_bytes(batch, kv, n_heads),
                                "attention mass tile statistics");
      cuda::launch_attention_mass(batch, q, kv, n_heads, scale, mass_scratch, stream_);
    }
  }

  // y += bias per row, after a matmul of a weight that has one.
  void add_bias(const Weight& w, const View& y) {
    if (w.bias.empty()) return;
    require_dtype(w.bias, DType::F32, "matmul", "bias");
    cuda::launch_add_bias(w.bias, y, stream_);
  }

  // Recorded op sequences (decode steps, benchmark rounds) by (owner, the owner's key).
  std::map<std::pair<const void*, uint64_t>, cudaGraphExec_t> graphs_;
  // The device copy of the layers' pointers the eviction kernels index by layer.
  struct LayerTable {
    DeviceKvLayer* layers;
    const int32_t* const* positions;
    const policy::SelectionLayer* selection;
  };

  // One table per pool (per set of layer pointers), uploaded the first time its pool is evicted and
  // kept while the backend lives: a graph recorded for one pool keeps reading its own table however
  // many other pools (engines, benchmark pools) evict in between, and a recording never uploads.
  struct LayerTableEntry {
    Buffer memory;
    LayerTable table{};
  };
  const LayerTable* upload_layer_table(const std::vector<KvLayer>& layers) {
    std::vector<const void*> key;
    key.reserve(layers.size() * 6);
    for (const KvLayer& kv : layers)
      for (const void* p : {static_cast<const void*>(kv.keys), static_cast<const void*>(kv.values),
                            static_cast<const void*>(kv.positions), static_cast<const void*>(kv.value_range),
                            static_cast<const void*>(kv.attention_mass), static_cast<const void*>(kv.query_ring)})
        key.push_back(p);
    if (auto it = layer_tables_.find(key); it != layer_tables_.end()) return &it->second.table;
    if (capturing_) {
      abort_capture();
      fail("CUDA evict: a KV pool's layer table is uploaded by an eager step, never inside a recording");
    }
    std::vector<DeviceKvLayer> host(layers.size());
    std::vector<policy::SelectionLayer> selection(layers.size());
    std::vector<const int32_t*> positions(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      const KvLayer& kv = layers[l];
      host[l] = {kv.keys, kv.values, kv.positions, kv.value_range, kv.attention_mass};
      selection[l] = {kv.keys, kv.positions, kv.value_range, kv.query_ring, kv.attention_mass};
      positions[l] = kv.positions;
    }
    auto round_up = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    const size_t layer_bytes = round_up(sizeof(DeviceKvLayer) * host.size());
    const size_t position_bytes = round_up(sizeof(int32_t*) * host.size());
    LayerTableEntry entry;
    entry.memory = alloc(layer_bytes + position_bytes + sizeof(policy::SelectionLayer) * host.size(), "layer table");
    char* base = static_cast<char*>(entry.memory.data());
    // Rare (once per KV pool), so a synchronous copy is fine.
    CUDA_CHECK(cudaMemcpyAsync(base, host.data(), sizeof(DeviceKvLayer) * host.size(), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(base + layer_bytes, positions.data(), sizeof(int32_t*) * host.size(),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(base + layer_bytes + position_bytes, selection.data(),
                               sizeof(policy::SelectionLayer) * host.size(), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    entry.table = {reinterpret_cast<DeviceKvLayer*>(base), reinterpret_cast<const int32_t* const*>(base + layer_bytes),
                   reinterpret_cast<const policy::SelectionLayer*>(base + layer_bytes + position_bytes)};
    return &layer_tables_.emplace(std::move(key), std::move(entry)).first->second.table;
  }

  // A policy's options bound into its CUDA file's parameters and its table uploaded once (keyed by the
  // policy object and its full spec, so a new policy at a recycled address is bound and uploaded again).
  struct CachedParams {
    std::string spec;
    policy::CudaParams params;
    policy::DeviceTable shape;  // values emptied once uploaded
    Buffer table;
  };
  const CachedParams& cuda_params(const policy::EvictionPolicy& policy) {
    const std::string spec = policy::describe(policy);
    CachedParams& cached = params_[&policy];
    if (cached.spec != spec || cached.spec.empty()) {
      cached.spec = spec;
      cached.params = policy::bind_cuda_params(policy);
      cached.shape = policy.device_table();
      const std::vector<double> table = std::move(cached.shape.values);
      cached.shape.values.clear();
      cached.table =
          alloc(table.size() * sizeof(double), fmt::format("policy '{}' device table", policy.name()));
      if (!table.empty()) {
        upload(cached.table.data(), table.data(), table.size() * sizeof(double));
        CUDA_CHECK(cudaStreamSynchronize(stream_));  // `table` dies here
      }
    }
    return cached;
  }

  // What a scoring selection reads must be there, in the shapes its kernels take (errors name the policy).
  static void check_scoring_inputs(const std::vector<KvLayer>& layers, const policy::EvictionPolicy& policy,
                                   const policy::SignalNeeds& needs, const CachedParams& cached) {
    const KvLayer& first = layers.front();
    if (first.dtype != DType::BF16)
      fail("CUDA evict: policy '{}' reads a bf16 KV pool, got {}", policy.name(), dtype_name(first.dtype));
    if (first.head_dim % 8 != 0 || first.head_dim > 256)
      fail("CUDA evict: policy '{}' needs head_dim a multiple of 8 and at most 256, got {}", policy.name(),
           first.head_dim);
    for (const KvLayer& layer : layers) {
      if (needs.window_queries &&
          (layer.query_ring == nullptr || layer.n_heads <= 0 || layer.n_heads % layer.n_kv_heads != 0 ||
           layer.ring_window <= 0 || layer.ring_window != first.ring_window))
        fail("CUDA evict: policy '{}' needs window queries but the KV pool records none", policy.name());
      if (needs.value_ranges && layer.value_range == nullptr)
        fail("CUDA evict: policy '{}' needs value ranges but the KV pool records none", policy.name());
      if (needs.accumulated_attention && layer.attention_mass == nullptr)
        fail("CUDA evict: policy '{}' needs attention mass but the KV pool records none", policy.name());
      // The selections copy key rows and window-query rows 16 bytes at a time (cp.async, uint4 loads).
      if (reinterpret_cast<uintptr_t>(layer.keys) % 16 != 0 ||
          reinterpret_cast<uintptr_t>(layer.query_ring) % 16 != 0)
        fail("CUDA evict: policy '{}' reads key and query-ring rows 16 bytes at a time; the KV pool's arrays "
             "are not 16-byte aligned",
             policy.name());
    }
    const policy::DeviceTable& p = cached.shape;
    if (p.heads > 0) {
      if (p.layers != static_cast<int>(layers.size()) || p.kv_heads != first.n_kv_heads ||
          p.head_dim != first.head_dim || p.heads % first.n_kv_heads != 0)
        fail(
            "CUDA evict: policy '{}' has a table for {} layers, {} query / {} KV heads of dim {}; the cache "
            "has {} layers, {} KV heads of dim {}",
            policy.name(), p.layers, p.heads, p.kv_heads, p.head_dim, layers.size(),
            first.n_kv_heads, first.head_dim);
      if (p.heads / first.n_kv_heads * (first.head_dim / 2) > 1024)
        fail("CUDA evict: policy '{}' takes GQA group x bands up to 1024, got {} x {}", policy.name(),
             p.heads / first.n_kv_heads, first.head_dim / 2);
    }
  }

  // Grows `s` to at least `bytes`. The new buffer is allocated before the old one is freed (a failed
  // allocation leaves the old one and every recording valid); once the old one is freed, every
  // recorded graph is dropped, since any of them may have baked in its address (a replay would write
  // freed memory: the illegal address under server load, where a prefill or a larger batch grew a
  // scratch after smaller batches had been recorded). Owners record again on their next step.
  void* grow(Scratch& s, size_t bytes, const char* what) {
    if (bytes <= s.bytes) return s.data;
    if (capturing_) {
      // Every shape runs eagerly before it is recorded, so its scratch has grown already.
      abort_capture();
      fail("CUDA: {} scratch would grow to {} bytes inside a recording", what, bytes);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // kernels may still read the old buffer
    const size_t rounded = (bytes + (size_t{1} << 20) - 1) >> 20 << 20;
    void* fresh = nullptr;
    const cudaError_t status = cudaMalloc(&fresh, rounded);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      const MemoryInfo info = memory();
      fail("cannot allocate {} scratch ({:.2f} GiB) on CUDA device {}: {:.2f} GiB free of {:.2f} GiB", what,
           static_cast<double>(rounded) / kGiB, device_, static_cast<double>(info.free_bytes) / kGiB,
           static_cast<double>(info.total_bytes) / kGiB);
    }
    CUDA_CHECK(status);
    CUDA_CHECK(cudaMemsetAsync(fresh, 0, rounded, stream_));  // split counters start at zero
    if (s.data != nullptr) {
      drop_all_graphs();
      CUDA_CHECK(cudaFree(s.data));
    }
    s.data = fresh;
    s.bytes = rounded;
    note_memory_use();
    return s.data;
  }

  void drop_all_graphs() {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_dropped_ += static_cast<int64_t>(graphs_.size());
    graphs_.clear();
  }

  // Ends a recording that cannot complete, discarding it, so the stream is usable after the error.
  void abort_capture() {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  }

  int device_;
  cudaDeviceProp properties_{};
  cudaStream_t stream_ = nullptr;
  static constexpr uint64_t kTicketEvents = 4;  // mark() tickets in flight at most
  cudaEvent_t ticket_events_[kTicketEvents] = {};
  uint64_t next_ticket_ = 0;
  int* error_host_ = nullptr;    // pinned, mapped: written by the eviction kernels
  int* error_device_ = nullptr;  // the same word as the device sees it
  std::unique_ptr<cuda::LtGemm> gemm_;
  Scratch attention_scratch_, split_counters_, mass_scratch_, mass_logits_, sample_scratch_, keep_scratch_,
      score_scratch_, round_keep_scratch_;
  bool capturing_ = false;       // between begin_capture and end_capture
  int64_t graphs_dropped_ = 0;   // recordings destroyed because a scratch buffer they used moved
  std::map<std::vector<const void*>, LayerTableEntry> layer_tables_;
  std::map<const policy::EvictionPolicy*, CachedParams> params_;
  mutable int64_t peak_used_bytes_ = 0;  // high-water mark of total - free (peak_memory_bytes)

  void note_memory_use() const {
    const MemoryInfo info = memory();
    peak_used_bytes_ = std::max(peak_used_bytes_, info.total_bytes - info.free_bytes);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

cudaStream_t cuda::backend_stream(Backend& backend) {
  const auto* be = dynamic_cast<const CudaBackend*>(&backend);
  if (be == nullptr) fail("a CUDA backend's stream was asked of the {} backend", backend.name());
  return be->stream();
}

bool cuda_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace kvdice::backend
