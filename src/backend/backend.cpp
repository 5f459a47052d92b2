#include "backend/backend.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "core/error.h"

namespace kvdice::backend {

View View::row_slice(int64_t begin, int64_t n) const {
  KVDICE_CHECK(begin >= 0 && n >= 0 && begin + n <= rows, "row slice [{}, {}) of {} rows", begin, begin + n,
               rows);
  View out = *this;
  out.data = static_cast<char*>(data) + begin * ld * static_cast<int64_t>(dtype_size(dtype));
  out.rows = n;
  return out;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    free_ = std::move(other.free_);
  }
  return *this;
}

void Buffer::reset() {
  if (data_ != nullptr && free_) free_(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Buffer Backend::alloc_host(size_t bytes, const std::string& what) {
  void* p = std::malloc(std::max<size_t>(bytes, 1));
  if (p == nullptr) fail("cannot allocate {} bytes of host memory for {}", bytes, what);
  return Buffer(p, bytes, [](void* q) { std::free(q); });
}

void Backend::store_to_host(int32_t* host_dst, const int32_t* src, int words) {
  download(host_dst, src, sizeof(int32_t) * static_cast<size_t>(words));
}

void* Buffer::Carver::take(size_t bytes) {
  constexpr size_t kAlign = 256;
  const size_t begin = (used_ + kAlign - 1) / kAlign * kAlign;
  KVDICE_CHECK(base_ == nullptr || begin + bytes <= size_, "carving {} bytes at {} overruns a {}-byte buffer",
               bytes, begin, size_);
  used_ = begin + bytes;
  return base_ == nullptr ? nullptr : base_ + begin;
}

View Buffer::Carver::matrix(DType dtype, int64_t rows, int64_t cols) {
  View v;
  v.data = take(static_cast<size_t>(rows * cols) * dtype_size(dtype));
  v.dtype = dtype;
  v.rows = rows;
  v.cols = cols;
  v.ld = cols;
  return v;
}

std::unique_ptr<Backend> make_cuda_backend(int device);  // cuda/cuda_backend.cu, CUDA builds only

#ifndef KVDICE_WITH_CUDA
bool cuda_available() { return false; }
#endif

CpuMath parse_cpu_math(const std::string& name) {
  if (name == "fast") return CpuMath::Fast;
  if (name == "exact") return CpuMath::Exact;
  fail("--cpu-math must be fast or exact (got '{}')", name);
}

void Backend::embed_blocks(const StepBatch& batch, const Weight& table, const View& x) {
  fail("backend {} cannot read a weight kept in GGUF blocks", name());
}

bool runs_on_cpu(const BackendOptions& options) {
  return options.name == "cpu" || (options.name == "auto" && !cuda_available());
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  const CpuMath math = parse_cpu_math(options.cpu_math);
  if (options.name == "cpu") return make_cpu_backend(options.threads, math);
  if (options.name == "cuda" || (options.name == "auto" && cuda_available())) {
#ifdef KVDICE_WITH_CUDA
    if (!cuda_available())
      fail(
          "--backend cuda: no usable CUDA GPU is visible to this process (no device, or no driver); use "
          "--backend cpu "
          "or auto");
    return make_cuda_backend(options.device);
#else
    fail("--backend cuda: this kvdice was built without CUDA (configure with -DKVDICE_CUDA=ON)");
#endif
  }
  if (options.name == "auto") return make_cpu_backend(options.threads, math);
  fail("--backend must be cpu, cuda or auto (got '{}')", options.name);
}

}  // namespace kvdice::backend
