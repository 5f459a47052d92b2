// An owning fp32 host tensor: what the CPU reference backend computes with and what loaders produce.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace kvdice {

struct Tensor {
  std::vector<float> data;
  std::vector<int64_t> shape;  // row-major, outermost first (PyTorch order)

  Tensor() = default;
  Tensor(std::vector<int64_t> dims) : shape(std::move(dims)) { data.assign(numel(), 0.0f); }

  bool empty() const { return data.empty(); }
  int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  }
  int64_t dim(int i) const { return shape.at(i); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace kvdice
