// rope_inverse_frequencies against the frequencies transformers computes
// (modeling_rope_utils._compute_default_rope_parameters and _compute_llama3_parameters), re-derived here
// step by step in float32 as torch does, for the default table, partial rotary and llama3 scaling with
// all three bands (kept, interpolated, divided) present.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace kvdice::model {
namespace {

// transformers, float32 throughout:
//   inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim)
//   low_freq_wavelen = old_context_len / low_freq_factor; high_freq_wavelen = old_context_len /
//   high_freq_factor wavelen = 2 * pi / inv_freq inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq
//   / factor, inv_freq) smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor -
//   low_freq_factor) smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama is_medium =
//   !(wavelen < high_freq_wavelen) & !(wavelen > low_freq_wavelen) inv_freq_llama = where(is_medium,
//   smoothed, inv_freq_llama)
struct Reference {
  std::vector<float> inv_freq;
  int kept = 0, smoothed = 0, divided = 0;  // how many frequencies fell in each band
};

Reference transformers_inv_freq(float base, int dim, const RopeScaling* llama3) {
  Reference ref;
  for (int i = 0; i < dim; i += 2) {
    const float exponent = static_cast<float>(i) / static_cast<float>(dim);
    ref.inv_freq.push_back(1.0f / std::pow(base, exponent));
  }
  if (llama3 == nullptr) return ref;
  const float factor = llama3->factor, low = llama3->low_freq_factor, high = llama3->high_freq_factor;
  const float old_context = static_cast<float>(llama3->original_max_position);
  const float low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  for (float& f : ref.inv_freq) {
    const float wavelen = 2.0f * static_cast<float>(std::numbers::pi) / f;
    const float llama = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = (old_context / wavelen - low) / (high - low);
    const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = medium ? smoothed : llama;
    (medium ? ref.smoothed : wavelen > low_freq_wavelen ? ref.divided : ref.kept)++;
  }
  return ref;
}

void expect_close(const std::vector<float>& ours, const std::vector<float>& reference) {
  ASSERT_EQ(ours.size(), reference.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    // double vs float32 evaluation: a few ulp apart, never more.
    EXPECT_NEAR(ours[i], reference[i], 4e-6 * std::abs(reference[i])) << "frequency " << i;
  }
}

ModelConfig config(int head_dim, float theta, float partial = 1.0f) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.partial_rotary_factor = partial;
  return c;
}

TEST(Rope, DefaultFrequencies) {
  expect_close(rope_inverse_frequencies(config(128, 1e6f)),
               transformers_inv_freq(1e6f, 128, nullptr).inv_freq);
  expect_close(rope_inverse_frequencies(config(64, 10000.0f)),
               transformers_inv_freq(10000.0f, 64, nullptr).inv_freq);
}

TEST(Rope, PartialRotaryRotatesOnlyItsShare) {
  // Phi-4-mini: head_dim 128, partial_rotary_factor 0.75 -> 96 rotary dimensions, 48 frequencies.
  const auto ours = rope_inverse_frequencies(config(128, 10000.0f, 0.75f));
  EXPECT_EQ(ours.size(), 48u);
  expect_close(ours, transformers_inv_freq(10000.0f, 96, nullptr).inv_freq);
}

TEST(Rope, Llama3ScalingMatchesTransformersInEveryBand) {
  struct Row {
    int head_dim;
    float theta;
    RopeScaling scaling;
  };
  const Row rows[] = {
      {128, 500000.0f, {"llama3", 8.0f, 1.0f, 4.0f, 8192}},   // Llama 3.1 8B
      {64, 500000.0f, {"llama3", 32.0f, 1.0f, 4.0f, 8192}},   // Llama 3.2 1B
      {128, 500000.0f, {"llama3", 16.0f, 2.0f, 8.0f, 4096}},  // other factors, to catch swapped terms
  };
  for (const Row& row : rows) {
    SCOPED_TRACE("factor " + std::to_string(row.scaling.factor));
    ModelConfig c = config(row.head_dim, row.theta);
    c.rope_scaling = row.scaling;
    const Reference ref = transformers_inv_freq(row.theta, row.head_dim, &row.scaling);
    // Every band is exercised, so no branch of the formula goes unchecked.
    EXPECT_GT(ref.kept, 0);
    EXPECT_GT(ref.smoothed, 0);
    EXPECT_GT(ref.divided, 0);
    expect_close(rope_inverse_frequencies(c), ref.inv_freq);
  }
}

}  // namespace
}  // namespace kvdice::model
