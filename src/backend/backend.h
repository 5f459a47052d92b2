// Backend: owns memory (typed views over its buffers, weights, the KV pool, the step batch) and the
// fused, batched ops one forward step is made of. The CPU backend (cpu/) is the readable fp32
// reference and runs every op eagerly; the CUDA backend (cuda/) implements the same ops in bf16 with
// fp32 accumulation and is checked against it op by op (tests/backend). Every op covers the whole
// step batch; per-sequence variation comes from the arrays of a StepBatch, never from host loops, so
// a decode step needs no host data between ops (the shape CUDA graphs need).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/step_batch.h"
#include "core/dtype.h"

namespace kvdice::policy {
class EvictionPolicy;
}

namespace kvdice::backend {

// A 2-D row-major matrix in backend memory: element (r, c) at data + (r * ld + c) * dtype_size.
struct View {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, ld = 0;  // ld in elements

  bool empty() const { return data == nullptr; }
  int64_t bytes() const { return rows * ld * static_cast<int64_t>(dtype_size(dtype)); }
  // Rows [begin, begin + n) as a view of the same memory.
  View row_slice(int64_t begin, int64_t n) const;
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Consecutive rows of a weight kept in a GGUF block format or as 16-bit floats (ggml type id), `row_bytes`
// apart, in memory the loaded model owns (the mapped GGUF or safetensors file). Only a backend that
// lists the type in block_weight_types() is given these.
struct BlockRows {
  uint32_t ggml_type = 0;
  const uint8_t* data = nullptr;
  int64_t rows = 0, row_bytes = 0;
};

// A linear layer's weight [out, in] (nn.Linear layout) and optional bias [out] (fp32). When `blocks`
// is non-empty the weight is those rows stacked in order and `w` gives only the shape (no data).
struct Weight {
  View w;
  View bias;                           // empty: no bias
  std::vector<BlockRows> blocks = {};  // empty: the values are in `w`
};

// Owning handle to backend memory; freed through the backend that made it.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, std::function<void(void*)> free_fn)
      : data_(data), bytes_(bytes), free_(std::move(free_fn)) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Carves typed views or arrays out of the buffer in order (256-byte aligned).
  class Carver {
   public:
    explicit Carver(const Buffer& buffer) : base_(static_cast<char*>(buffer.data())), size_(buffer.bytes()) {}
    explicit Carver(size_t measure_only) : base_(nullptr), size_(measure_only) {}
    void* take(size_t bytes);
    View matrix(DType dtype, int64_t rows, int64_t cols);
    template <class T>
    T* array(int64_t n) {
      return static_cast<T*>(take(sizeof(T) * static_cast<size_t>(n)));
    }
    size_t used() const { return used_; }

   private:
    char* base_;
    size_t size_;
    size_t used_ = 0;
  };

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::function<void(void*)> free_;
};

// One layer of the KV pool (see kv/kv_pool.h for the layout): pages of `page_slots` slots; keys and
// values [n_pages][n_kv_heads][page_slots][head_dim] in the pool's dtype, absolute positions
// [n_pages][n_kv_heads][page_slots] int32. A sequence's slot s lives in page
// page_table[s / page_slots] at offset s % page_slots.
struct KvLayer {
  void* keys = nullptr;
  void* values = nullptr;
  int32_t* positions = nullptr;
  DType dtype = DType::F32;
  int n_kv_heads = 0, head_dim = 0, page_slots = 0;
  int layer = 0;
  // Signals for scoring policies (docs/policies.md), fp32 but for the bf16 query ring, recorded only
  // when a policy of the engine needs them (nullptr otherwise). Both backends record all three (the
  // CUDA backend the attention mass in its own op after the attention kernels, from the logits the
  // decode attention stores where that kernel runs).
  // Per slot, indexed like positions, moved with K/V by compaction:
  float* value_range = nullptr;     // max - min over the slot's value channels, written at append
  float* attention_mass = nullptr;  // attention the slot received from every query since its append
  // Per sequence, not per slot: the query ring is [ring row][query head][ring_window][head_dim]; a
  // sequence holding ring row q (StepBatch::ring_row, given at admission) keeps the post-RoPE query of
  // absolute position p, query head h, at [q][h][p % r][:], so r <= ring_window. n_heads query heads.
  // Only the step's last r rows of a sequence write it (a longer prefill chunk leaves its last r
  // queries); a sequence with ring row -1 writes none. Elements are bf16 bits on both backends (the
  // model's dtype, as the reference keeps its query window), rounded from the fp32 query by
  // core/dtype.h's f32_to_bf16 (nearest, ties to even), so both backends hold the same bits.
  uint16_t* query_ring = nullptr;
  int n_heads = 0;
  int ring_window = 0, ring_rows = 0;
  // Element offset of (ring row, query head, ring slot) in query_ring.
  int64_t ring_index(int row, int head, int ring_slot) const {
    return ((static_cast<int64_t>(row) * n_heads + head) * ring_window + ring_slot) * head_dim;
  }
  // Element offset of (page, head, offset-in-page) for keys/values; positions use it / head_dim.
  int64_t slot_index(int32_t page, int head, int offset) const {
    return (static_cast<int64_t>(page) * n_kv_heads + head) * page_slots + offset;
  }
};

// RoPE (rotate-half) tables: inv_freq[rotary_dim / 2] fp32 in backend memory.
struct Rope {
  const float* inv_freq = nullptr;
  int rotary_dim = 0;
};

// One decoder layer's weights as a backend holds them (uploaded once by model::ForwardPass).
struct DecoderLayerWeights {
  View attn_norm, mlp_norm, q_norm, k_norm;  // fp32; q/k norms empty unless the model has them (Qwen3)
  Weight qkv;                                // [q_dim + 2 kv_dim, hidden] (+ bias with qkv_bias)
  Weight wo;                                 // [hidden, q_dim]
  Weight gate_up;                            // [2 intermediate, hidden], gate first
  Weight down;                               // [hidden, intermediate]
};

struct MemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual bool is_cpu() const = 0;
  // Dtype of GEMM inputs between ops (fp32 on CPU, bf16 on CUDA). The residual stream, GEMM outputs
  // that feed norms, and logits are always fp32.
  virtual DType activation_dtype() const = 0;
  virtual DType weight_dtype() const = 0;
  // Stored types (ggml ids: GGUF blocks; F16, BF16 matrices of either format) this backend reads as
  // stored: a model loaded for it keeps such weights instead of converting them. None by default.
  virtual std::vector<uint32_t> block_weight_types() const { return {}; }
  virtual DType kv_dtype() const = 0;

  // ---- memory -------------------------------------------------------------------------------
  // Error naming `what`, the size and the free memory when it does not fit.
  virtual Buffer alloc(size_t bytes, const std::string& what) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // Copies `bytes` between two regions of this backend's memory (which must not overlap), in order
  // with the other ops.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Writes a host fp32 matrix [rows, cols] into `dst`, converting to dst.dtype (round to nearest even).
  virtual void upload_matrix(const View& dst, const float* src) = 0;
  // Reads `src` back as fp32 [rows, cols] (tests and mechanism studies; not on the fast path).
  virtual void download_matrix(const View& src, float* dst) = 0;
  virtual void synchronize() = 0;
  // Reading a step's outputs while the next step runs (the engine reads sampled tokens one step late):
  // alloc_host gives host memory the device can write (CUDA: pinned and mapped); store_to_host is an
  // op in stream order, recordable in a graph, that copies `words` 32-bit words of device memory into
  // it (CUDA: a kernel's stores over the bus; a DMA copy between two steps' graphs cost ~9 us a step at
  // batch 1); mark() returns a ticket for everything issued so far, and wait(ticket) blocks until that
  // is done. A backend whose ops run at once (the CPU) copies immediately and waits for nothing: these
  // defaults.
  virtual Buffer alloc_host(size_t bytes, const std::string& what);
  virtual void store_to_host(int32_t* host_dst, const int32_t* src, int words);
  virtual uint64_t mark() { return 0; }
  virtual void wait(uint64_t ticket) {}
  virtual MemoryInfo memory() const = 0;
  // What the backend chose for the work it has run so far that a reader of a benchmark should know
  // (CUDA: where each GEMM shape's cuBLASLt algorithm came from); empty when there is nothing to say.
  virtual std::string kernel_choices() const { return {}; }
  // Highest memory use seen so far (kvdice bench): CUDA, the device's used memory (total - free, the
  // context included) sampled at every allocation and at this call; CPU, the process's peak RSS.
  virtual int64_t peak_memory_bytes() const = 0;
  // The device's copy bandwidth in bytes per second, reads plus writes (a copy of n bytes moves 2n):
  // the best of `repeats` timed copies of a `bytes`-byte buffer (CUDA: device to device, at least
  // 1 GiB, timed with events; CPU: memcpy). The roofline kvdice bench divides by.
  virtual double measure_copy_bandwidth(size_t bytes, int repeats) = 0;

  // ---- ops (all asynchronous on CUDA, in stream order) -----------------------------------------
  // x[row, :] = table[tokens[row], :]  (x fp32 [n_rows, hidden]).
  virtual void embed(const StepBatch& batch, const View& table, const View& x) = 0;
  // The same from a table kept in blocks (Weight::blocks); only backends with block_weight_types().
  virtual void embed_blocks(const StepBatch& batch, const Weight& table, const View& x);
  // y = x / rms(x) * w per row (x fp32; y fp32 or activation dtype; w fp32 [cols]).
  virtual void rmsnorm(const View& x, const View& w, const View& y, float eps) = 0;
  // y = x · W^T + bias, or y += x · W^T when `accumulate` (y fp32, the residual stream).
  virtual void matmul(const View& x, const Weight& w, const View& y, bool accumulate) = 0;
  // rmsnorm(x, norm, h, eps) then matmul(h, w, y, false), which is this default (h: the composition's
  // scratch). CUDA fuses them for one-row steps on weights of up to 64 MiB (gemv_norm.cu: the QKV
  // projection at batch 1): every CTA norms the row into its shared memory, bit-identical to rmsnorm's
  // output, and h is left unwritten (only the matmul reads it).
  virtual void rmsnorm_matmul(const View& x, const View& norm, float eps, const View& h, const Weight& w,
                              const View& y) {
    rmsnorm(x, norm, h, eps);
    matmul(h, w, y, /*accumulate=*/false);
  }
  // For each row: split qkv (fp32 [n_rows, (n_heads + 2 n_kv) * head_dim], q then k then v), apply the
  // per-head RMSNorm to q and k when the norms are given (Qwen3), rotate q and k at the row's absolute
  // position (batch.appended[seq] + row - seq_row_begin[seq]), write q into `q` (activation dtype
  // [n_rows, n_heads * head_dim]) and k, v and the position into the row's next KV slot
  // (slot batch.length[seq] + row - seq_row_begin[seq]) of every KV head of `kv`.
  virtual void qk_norm_rope_append(const StepBatch& batch, const View& qkv, const View& q_norm,
                                   const View& k_norm, float eps, const Rope& rope, const KvLayer& kv,
                                   const View& q, int n_heads) = 0;
  // Causal attention of each row's query heads over its sequence's resident slots plus the step's new
  // ones: row i of a sequence with n new rows and L resident slots before the step sees slots
  // [0, L + i]. GQA: query head h reads KV head h / (n_heads / n_kv_heads). out: activation dtype.
  virtual void attention(const StepBatch& batch, const View& q, const KvLayer& kv, const View& out,
                         int n_heads, float scale) = 0;
  // qk_norm_rope_append then attention as one op, which is this default. CUDA fuses them for decode
  // steps on a bf16 pool that records no scoring signals (decode_attention.cu): each attention CTA
  // norms and rotates its own query heads and appends its KV head's new slot, bit-identical to the two
  // ops, and `q` is then left unwritten (only these ops read it).
  virtual void rope_attention(const StepBatch& batch, const View& qkv, const View& q_norm, const View& k_norm,
                              float eps, const Rope& rope, const KvLayer& kv, const View& q, const View& out,
                              int n_heads, float scale) {
    qk_norm_rope_append(batch, qkv, q_norm, k_norm, eps, rope, kv, q, n_heads);
    attention(batch, q, kv, out, n_heads, scale);
  }
  // out = silu(gate_up[:, :n]) * gate_up[:, n:]  (gate_up fp32 [rows, 2n]; out activation dtype).
  virtual void silu_mul(const View& gate_up, const View& out) = 0;
  // out[s, :] = x[seq_row_begin[s + 1] - 1, :]: each sequence's last row (for its logits).
  virtual void gather_last_rows(const StepBatch& batch, const View& x, const View& out) = 0;
  // After the forward: length[s] += n_new(s), appended[s] += n_new(s).
  virtual void advance(const StepBatch& batch) = 0;
  // Writes next_token[s] for every sequence from logits [n_seqs, vocab] fp32 (engine/sampling.h is
  // the exact rule; CPU and CUDA pick the same token from the same logits), or, for rows with
  // forced[s] >= 0, takes the forced token and writes its log-probability and whether it was the
  // argmax. gen_step[s] += 1.
  virtual void sample(const StepBatch& batch, const View& logits) = 0;
  // The eviction round of every due sequence (length > T and length % r == 0, per row) and every
  // (layer, KV head) in one call: `policy`'s selection writes keep flags, one shared compaction moves
  // survivors at or above T into the holes below T (kv/eviction_round.h's exact pairing), then
  // length = T and round += 1. Rows whose policy_id differs from `policy_id` or that are not due do
  // nothing. The CPU twin is kv::run_eviction_round.
  // Error naming the policy when this backend cannot run its selection (no CUDA file).
  virtual void check_policy(const policy::EvictionPolicy& policy) const {}
  virtual void evict(const StepBatch& batch, const std::vector<KvLayer>& layers,
                     const policy::EvictionPolicy& policy, int policy_id) = 0;

  // ---- graphs: a recorded sequence of ops replayed with one launch (CUDA graphs) ------------------
  // Backends without graphs return false and the caller runs the ops eagerly. Between begin_capture
  // and end_capture the ops are recorded, not run; replay(key) runs a recorded sequence. The ops
  // must not read host data or allocate while recording (run the same sequence eagerly once first).
  // Graphs belong to an owner (an engine, a benchmark): a recording bakes in the owner's buffers, so
  // a key means something only to its owner, and the owner drops its graphs before its buffers go.
  // The backend drops every graph itself when a scratch buffer of its own moves (it grows): replay
  // then returns false and the owner records again.
  virtual bool begin_capture() { return false; }
  virtual void end_capture(const void* owner, uint64_t key) {}
  virtual bool replay(const void* owner, uint64_t key) { return false; }
  virtual void drop_graphs(const void* owner) {}
  // Graphs the backend dropped because a buffer they had recorded moved (the soak reports it).
  virtual int64_t graphs_dropped() const { return 0; }
};

// The most CPU threads a backend takes: more is a typo, not a machine (OpenMP crashed at 100000).
inline constexpr int kMaxCpuThreads = 1024;

// Which backend to run on: "cpu", "cuda", or "auto" (CUDA when a GPU is visible, else CPU).
// How the CPU backend computes the linear layers of a GGUF model: Fast keeps the weights in their
// GGUF blocks and multiplies with int8-quantised activations (llama.cpp's method); Exact converts
// them to fp32 at load and multiplies in fp32 (the reference every other path is checked against).
enum class CpuMath { Fast, Exact };
CpuMath parse_cpu_math(const std::string& name);  // "fast" | "exact"; Error otherwise

struct BackendOptions {
  std::string name = "auto";
  int threads = 0;                // CPU threads; 0 = all cores
  int device = 0;                 // CUDA device index
  std::string cpu_math = "fast";  // CpuMath, by name
};

std::unique_ptr<Backend> make_backend(const BackendOptions& options);
// Whether make_backend(options) gives the CPU backend ("cpu", or "auto" where no CUDA GPU is visible).
bool runs_on_cpu(const BackendOptions& options);
// `threads` in [0, kMaxCpuThreads] (0 = all cores); Error otherwise.
std::unique_ptr<Backend> make_cpu_backend(int threads, CpuMath math = CpuMath::Exact);
// True when this build has the CUDA backend and a GPU is visible.
bool cuda_available();

}  // namespace kvdice::backend
