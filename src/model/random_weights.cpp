#include "model/random_weights.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "core/error.h"
#include "core/json.h"
#include "core/philox.h"
#include "model/weights.h"

namespace kvdice::model {
namespace {

// FNV-1a: a stable 64-bit name hash (std::hash may differ between standard libraries).
uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool is_norm(const std::string& name) {
  return name.ends_with("norm.weight") || name.ends_with("layernorm.weight");
}

class RandomTensorSource final : public TensorSource {
 public:
  RandomTensorSource(const ModelConfig& config, uint64_t seed, float stddev) : seed_(seed), stddev_(stddev) {
    for (RequiredTensor& r : required_tensors(config)) tensors_[r.name] = std::move(r.shape);
  }

  std::string describe() const override { return fmt::format("random weights (seed {})", seed_); }

  std::vector<TensorInfo> list() const override {
    std::vector<TensorInfo> out;
    for (const auto& [name, shape] : tensors_) out.push_back({name, "F32", shape});
    return out;
  }

  std::optional<TensorInfo> find(const std::string& name) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) return std::nullopt;
    return TensorInfo{name, "F32", it->second};
  }

  void check_loadable(const std::string& name) const override {
    if (!tensors_.count(name)) fail("{}: no tensor '{}'", describe(), name);
  }

  Tensor load_f32(const std::string& name) const override {
    check_loadable(name);
    Tensor tensor(tensors_.at(name));
    float* data = tensor.ptr();
    const int64_t n = tensor.numel();
    if (is_norm(name)) {
      std::fill_n(data, n, 1.0f);
      return tensor;
    }
    // Uniform on [-a, a] has standard deviation a / sqrt(3). Element i takes 16 bits of philox block
    // i / 8 (counter = block index split over two words), so the values depend on nothing but
    // (seed, name, i): the same for any number of threads.
    const float a = stddev_ * std::sqrt(3.0f);
    const PhiloxKey key = philox_key(seed_, name_hash(name), RngDomain::Sampling);
    const int64_t blocks = (n + 7) / 8;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const PhiloxBlock r =
          philox4x32_10({{static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), 0x52414e44u, 0u}}, key);
      const int64_t begin = b * 8, end = std::min(n, begin + 8);
      for (int64_t i = begin; i < end; ++i) {
        const int k = static_cast<int>(i - begin);
        const uint32_t bits = (r.v[k / 2] >> (16 * (k % 2))) & 0xffffu;
        data[i] = a * ((static_cast<float>(bits) + 0.5f) * (2.0f / 65536.0f) - 1.0f);
      }
    }
    return tensor;
  }

 private:
  uint64_t seed_;
  float stddev_;
  std::map<std::string, std::vector<int64_t>> tensors_;
};

}  // namespace

ModelConfig read_shape_config(const std::filesystem::path& config_json) {
  if (!std::filesystem::exists(config_json))
    fail("--config {}: no such file (give an HF config.json, e.g. configs/shapes/qwen3-4b.json)",
         config_json.string());
  return ModelConfig::from_hf_json(read_json_file(config_json), config_json.string());  // validates
}

std::unique_ptr<TensorSource> random_tensor_source(const ModelConfig& config, uint64_t seed, float stddev) {
  return std::make_unique<RandomTensorSource>(config, seed, stddev);
}

std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed, float stddev) {
  const auto source = random_tensor_source(config, seed, stddev);
  return std::make_unique<Model>(config, load_weights(config, *source));
}

}  // namespace kvdice::model
