#include "model/model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace kvdice::model {

std::vector<float> rope_inverse_frequencies(const ModelConfig& config) {
  const int rotary_dim = static_cast<int>(config.head_dim * config.partial_rotary_factor);
  std::vector<float> inv_freq(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) {
    inv_freq[i] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(config.rope_theta), 2.0 * i / rotary_dim));
  }
  const RopeScaling& s = config.rope_scaling;
  if (s.type == "llama3") {
    // Long wavelengths are divided by the factor, short ones kept, the band between interpolated.
    const double low_wavelen = s.original_max_position / s.low_freq_factor;
    const double high_wavelen = s.original_max_position / s.high_freq_factor;
    for (float& f : inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
      }
    }
  } else if (s.type != "default") {
    fail("unsupported RoPE scaling type '{}' (supported: default, llama3)", s.type);
  }
  return inv_freq;
}

Model::Model(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)), inv_freq_(rope_inverse_frequencies(config_)) {
  KVDICE_CHECK(static_cast<int>(weights_.layers.size()) == config_.n_layers, "layer count {} vs config {}",
               weights_.layers.size(), config_.n_layers);
}

namespace {

// Scratch activations for one forward call; rows = all new tokens of all sequences.
struct Activations {
  Activations(const ModelConfig& c, int rows)
      : x(size_t(rows) * c.hidden),
        h(size_t(rows) * c.hidden),
        q(size_t(rows) * c.q_dim()),
        k(size_t(rows) * c.kv_dim()),
        v(size_t(rows) * c.kv_dim()),
        attn(size_t(rows) * c.q_dim()),
        gate(size_t(rows) * c.intermediate),
        up(size_t(rows) * c.intermediate) {}
  std::vector<float> x, h, q, k, v, attn, gate, up;
};

}  // namespace

Tensor Model::forward(backend::Backend& be, std::span<const SequenceStep> steps, bool all_positions) const {
  const ModelConfig& c = config_;
  const int hd = c.head_dim;
  const int rotary_dim = static_cast<int>(hd * c.partial_rotary_factor);

  // Row offsets of each sequence's new tokens in the flattened batch.
  std::vector<int> row_begin(steps.size() + 1, 0);
  std::vector<int> ids;
  for (size_t s = 0; s < steps.size(); ++s) {
    const SequenceStep& step = steps[s];
    KVDICE_CHECK(step.kv != nullptr && !step.tokens.empty(), "step {} has no cache or no tokens", s);
    if (step.kv->length() + static_cast<int>(step.tokens.size()) > step.kv->capacity()) {
      fail("sequence {} would exceed its reserved KV capacity ({} + {} > {} slots)", s, step.kv->length(),
           step.tokens.size(), step.kv->capacity());
    }
    for (int t : step.tokens) {
      if (t < 0 || t >= c.vocab) fail("token id {} out of range for vocabulary of {}", t, c.vocab);
      ids.push_back(t);
    }
    row_begin[s + 1] = row_begin[s] + static_cast<int>(step.tokens.size());
  }
  const int rows = row_begin.back();
  Activations a(c, rows);
  be.embed(weights_.embed.ptr(), c.hidden, ids, a.x.data());

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    be.rmsnorm(a.x.data(), w.attn_norm.ptr(), a.h.data(), rows, c.hidden, c.rms_eps);
    be.matmul(a.h.data(), w.wq.ptr(), w.bq.empty() ? nullptr : w.bq.ptr(), a.q.data(), rows, c.hidden,
              c.q_dim());
    be.matmul(a.h.data(), w.wk.ptr(), w.bk.empty() ? nullptr : w.bk.ptr(), a.k.data(), rows, c.hidden,
              c.kv_dim());
    be.matmul(a.h.data(), w.wv.ptr(), w.bv.empty() ? nullptr : w.bv.ptr(), a.v.data(), rows, c.hidden,
              c.kv_dim());
    if (c.qk_norm) {
      be.rmsnorm(a.q.data(), w.q_norm.ptr(), a.q.data(), rows * c.n_heads, hd, c.rms_eps);
      be.rmsnorm(a.k.data(), w.k_norm.ptr(), a.k.data(), rows * c.n_kv_heads, hd, c.rms_eps);
    }
    // RoPE at each token's absolute position, then append K/V to the sequence's next slots.
    for (size_t s = 0; s < steps.size(); ++s) {
      kv::SequenceKv& cache = *steps[s].kv;
      for (int r = row_begin[s]; r < row_begin[s + 1]; ++r) {
        const int i = r - row_begin[s];
        const int64_t position = cache.appended() + i;
        be.rope(&a.q[size_t(r) * c.q_dim()], c.n_heads, hd, rotary_dim, inv_freq_.data(), position);
        be.rope(&a.k[size_t(r) * c.kv_dim()], c.n_kv_heads, hd, rotary_dim, inv_freq_.data(), position);
        const int slot = cache.length() + i;
        for (int g = 0; g < c.n_kv_heads; ++g) {
          std::copy_n(&a.k[size_t(r) * c.kv_dim() + size_t(g) * hd], hd, cache.key(layer, g, slot));
          std::copy_n(&a.v[size_t(r) * c.kv_dim() + size_t(g) * hd], hd, cache.value(layer, g, slot));
          cache.position(layer, g, slot) = static_cast<int32_t>(position);
        }
      }
    }
    // Attention per (sequence, query head) over that head's resident slots plus the new ones.
    const int n_tasks = static_cast<int>(steps.size()) * c.n_heads;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < n_tasks; ++task) {
      const int s = task / c.n_heads, head = task % c.n_heads, g = head / c.group_size();
      const kv::SequenceKv& cache = *steps[s].kv;
      const int n_q = row_begin[s + 1] - row_begin[s];
      std::vector<float> q_rows(size_t(n_q) * hd), out_rows(size_t(n_q) * hd);
      for (int i = 0; i < n_q; ++i)
        std::copy_n(&a.q[size_t(row_begin[s] + i) * c.q_dim() + size_t(head) * hd], hd,
                    &q_rows[size_t(i) * hd]);
      be.attention(q_rows.data(), cache.key(layer, g, 0), cache.value(layer, g, 0), out_rows.data(), n_q,
                   cache.length() + n_q, {hd, scale});
      for (int i = 0; i < n_q; ++i)
        std::copy_n(&out_rows[size_t(i) * hd], hd,
                    &a.attn[size_t(row_begin[s] + i) * c.q_dim() + size_t(head) * hd]);
    }
    be.matmul(a.attn.data(), w.wo.ptr(), nullptr, a.h.data(), rows, c.q_dim(), c.hidden);
    be.add(a.x.data(), a.h.data(), int64_t(rows) * c.hidden);

    be.rmsnorm(a.x.data(), w.mlp_norm.ptr(), a.h.data(), rows, c.hidden, c.rms_eps);
    be.matmul(a.h.data(), w.w_gate.ptr(), nullptr, a.gate.data(), rows, c.hidden, c.intermediate);
    be.matmul(a.h.data(), w.w_up.ptr(), nullptr, a.up.data(), rows, c.hidden, c.intermediate);
    be.silu_mul(a.gate.data(), a.up.data(), a.gate.data(), rows, c.intermediate);
    be.matmul(a.gate.data(), w.w_down.ptr(), nullptr, a.h.data(), rows, c.intermediate, c.hidden);
    be.add(a.x.data(), a.h.data(), int64_t(rows) * c.hidden);
  }
  for (const SequenceStep& step : steps) step.kv->commit(static_cast<int>(step.tokens.size()));

  // Final norm and logits only for the rows asked for.
  std::vector<int> out_rows;
  if (all_positions) {
    for (int r = 0; r < rows; ++r) out_rows.push_back(r);
  } else {
    for (size_t s = 0; s < steps.size(); ++s) out_rows.push_back(row_begin[s + 1] - 1);
  }
  const int n_out = static_cast<int>(out_rows.size());
  std::vector<float> selected(size_t(n_out) * c.hidden);
  for (int i = 0; i < n_out; ++i)
    std::copy_n(&a.x[size_t(out_rows[i]) * c.hidden], c.hidden, &selected[size_t(i) * c.hidden]);
  be.rmsnorm(selected.data(), weights_.final_norm.ptr(), selected.data(), n_out, c.hidden, c.rms_eps);
  Tensor logits({n_out, c.vocab});
  be.matmul(selected.data(), weights_.output_matrix().ptr(), nullptr, logits.ptr(), n_out, c.hidden, c.vocab);
  return logits;
}

}  // namespace kvdice::model
