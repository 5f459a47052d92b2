#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "backend/step_storage.h"
#include "core/error.h"
#include "core/step_row.h"
#include "formats/gguf_dequant.h"
#include "model/forward.h"

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

Tensor Model::forward(backend::Backend& be, std::span<const SequenceStep> steps, bool all_positions) const {
  KVDICE_CHECK(!steps.empty(), "forward of no sequences");
  const kv::KvPool& pool = steps[0].kv->pool();
  int rows = 0, max_pages = 1, max_rows_per_seq = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const SequenceStep& step = steps[s];
    KVDICE_CHECK(step.kv != nullptr && !step.tokens.empty(), "step {} has no cache or no tokens", s);
    KVDICE_CHECK(&step.kv->pool() == &pool, "the steps of one forward must share a KV pool");
    if (step.kv->length() + static_cast<int>(step.tokens.size()) > step.kv->capacity()) {
      fail("sequence {} would exceed its reserved KV capacity ({} + {} > {} slots)", s, step.kv->length(),
           step.tokens.size(), step.kv->capacity());
    }
    for (int t : step.tokens)
      if (t < 0 || t >= config_.vocab)
        fail("token id {} out of range for vocabulary of {}", t, config_.vocab);
    rows += static_cast<int>(step.tokens.size());
    max_rows_per_seq = std::max(max_rows_per_seq, static_cast<int>(step.tokens.size()));
    max_pages = std::max(max_pages, static_cast<int>(step.kv->pages().size()));
  }
  const int n_seqs = static_cast<int>(steps.size());
  ForwardPass pass(*this, be, rows, n_seqs, all_positions ? rows : n_seqs);
  backend::StepStorage storage(be, n_seqs, rows, max_pages);
  backend::StepBatch& b = storage.host();
  b.n_seqs = n_seqs;
  b.n_rows = rows;
  b.max_rows_per_seq = max_rows_per_seq;
  int row = 0;
  for (int s = 0; s < n_seqs; ++s) {
    const SequenceStep& step = steps[static_cast<size_t>(s)];
    backend::SeqRow seq;  // no eviction, no sampling: the caller reads the logits
    seq.tokens = step.tokens;
    seq.length = step.kv->length();
    seq.appended = step.kv->appended();
    seq.pages = step.kv->pages();
    row += backend::write_row(b, s, row, seq);
  }
  storage.upload_all();
  const backend::View logits = pass.run(storage.device(), pool, all_positions);
  Tensor out({logits.rows, logits.cols});
  be.download_matrix(logits, out.ptr());
  for (const SequenceStep& step : steps) step.kv->commit(static_cast<int>(step.tokens.size()));
  return out;
}

std::vector<float> Model::q_weight_norms() const {
  std::vector<float> norms;
  for (const LayerWeights& layer : weights_.layers) {
    double sum = 0.0;
    for (float w : layer.wq.data) sum += static_cast<double>(w) * w;
    const StoredBlocks& b = layer.wq_blocks;
    if (!b.empty()) {  // kept as stored: dequantised here a row at a time
      std::vector<float> row(static_cast<size_t>(b.cols));
      for (int64_t r = 0; r < b.rows; ++r) {
        formats::dequantize(static_cast<formats::GgmlType>(b.ggml_type),
                            {b.data + r * b.row_bytes, static_cast<size_t>(b.row_bytes)}, row, "wq");
        for (float w : row) sum += static_cast<double>(w) * w;
      }
    }
    norms.push_back(static_cast<float>(std::sqrt(sum)));
  }
  return norms;
}

policy::ModelFingerprint Model::fingerprint() const {
  return {.n_layers = config_.n_layers,
          .n_heads = config_.n_heads,
          .n_kv_heads = config_.n_kv_heads,
          .head_dim = config_.head_dim,
          .rope_inv_freq = inv_freq_,
          .q_weight_norms = [this] { return q_weight_norms(); }};
}

}  // namespace kvdice::model
