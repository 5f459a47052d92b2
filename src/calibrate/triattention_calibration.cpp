#include "calibrate/triattention_calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"
#include "core/step_row.h"
#include "kv/kv_pool.h"
#include "kv/sequence_kv.h"
#include "model/forward.h"

namespace kvdice::calibrate {

policy::TriAttentionStats collect_triattention_stats(const model::Model& model, backend::Backend& backend,
                                                     std::span<const int> tokens,
                                                     const CalibrationOptions& options) {
  const model::ModelConfig& c = model.config();
  if (!backend.is_cpu())
    fail("kvdice calibrate runs on the CPU backend (it reads the query ring from host memory)");
  if (tokens.empty()) fail("calibration text has no tokens");
  if (options.chunk < 1 || options.segment < options.chunk || options.segment % options.chunk != 0)
    fail("calibration segment {} must be a positive multiple of the chunk {}", options.segment,
         options.chunk);
  const int nf = c.head_dim / 2;
  if (static_cast<int>(model.rope_inv_freq().size()) != nf)
    fail("TriAttention needs RoPE over the whole head ({} bands); this model rotates {} (partial rotary)", nf,
         model.rope_inv_freq().size());
  for (int t : tokens)
    if (t < 0 || t >= c.vocab) fail("token id {} is outside the vocabulary ({})", t, c.vocab);

  const int page_slots = kv::KvPool::kDefaultPageSlots;
  const int64_t pages = (options.segment + page_slots - 1) / page_slots;
  // One sequence at a time; its ring row keeps a whole chunk's queries.
  kv::KvPool pool(backend, model.kv_shape(), pages, page_slots, policy::SignalNeeds{.window_queries = true},
                  kv::QueryRingShape{1, options.chunk, c.n_heads});
  const int ring_row = pool.allocate_ring_row();
  model::ForwardPass pass(model, backend, options.chunk, 1, 1);

  // Sums in double: [layer][head][band] of Re, Im and |.| of the pre-RoPE query.
  const size_t cells = static_cast<size_t>(c.n_layers) * c.n_heads * nf;
  std::vector<double> sum_re(cells, 0.0), sum_im(cells, 0.0), sum_abs(cells, 0.0);
  const std::vector<float>& inv_freq = model.rope_inv_freq();
  int64_t counted = 0;
  // After a chunk of n queries from position `at` (a multiple of the chunk, so ring slot r holds the
  // query of position at + r): their bands, rotated back to position 0, into the sums.
  auto add_chunk = [&](int at, int n) {
    for (int layer = 0; layer < c.n_layers; ++layer) {
      const backend::KvLayer& L = pool.layer(layer);
      for (int r = 0; r < n; ++r) {
        const double position = at + r;
        for (int h = 0; h < c.n_heads; ++h) {
          const uint16_t* q = L.query_ring + L.ring_index(ring_row, h, r);
          const size_t base = (static_cast<size_t>(layer) * c.n_heads + h) * nf;
          for (int f = 0; f < nf; ++f) {
            // Inverse rotation: (a + ib) · e^{-i p ω}.
            const double angle = position * static_cast<double>(inv_freq[f]);
            const double cs = std::cos(angle), sn = std::sin(angle), a = bf16_to_f32(q[f]),
                         bb = bf16_to_f32(q[f + nf]);
            const double re = a * cs + bb * sn, im = bb * cs - a * sn;
            sum_re[base + f] += re;
            sum_im[base + f] += im;
            sum_abs[base + f] += std::hypot(re, im);
          }
        }
      }
    }
    counted += n;
  };
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(options.segment)) {
    const int seg_len = static_cast<int>(std::min<size_t>(options.segment, tokens.size() - begin));
    std::vector<int32_t> page_ids = pool.allocate(pages * page_slots);
    KVDICE_CHECK(!page_ids.empty(), "calibration pool has no room for a segment");
    kv::SequenceKv kv(pool, page_ids, static_cast<int>(pages * page_slots));
    // The ring row records queries into ring slot position % window; no eviction runs here.
    backend::SeqRow row;
    row.pages = page_ids;
    row.budget = static_cast<int>(pages * page_slots);
    row.window = options.chunk;
    row.ring_row = ring_row;
    pass.prefill_in_chunks(pool, tokens.subspan(begin, static_cast<size_t>(seg_len)), row, options.chunk,
                           [&](int at, int n) {
                             kv.commit(n);
                             add_chunk(at, n);
                           });
    pool.release(page_ids);
  }

  policy::TriAttentionStats s;
  s.n_layers = c.n_layers;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv_heads;
  s.head_dim = c.head_dim;
  s.q_mean_real.resize(cells);
  s.q_mean_imag.resize(cells);
  s.q_abs_mean.resize(cells);
  for (size_t i = 0; i < cells; ++i) {
    s.q_mean_real[i] = static_cast<float>(sum_re[i] / counted);
    s.q_mean_imag[i] = static_cast<float>(sum_im[i] / counted);
    s.q_abs_mean[i] = static_cast<float>(sum_abs[i] / counted);
  }
  s.omega = inv_freq;
  // HF's default and llama3 RoPE have attention scaling 1: the rotation keeps each band's magnitude.
  s.freq_scale.assign(static_cast<size_t>(nf), 1.0f);
  s.q_weight_norm = model.q_weight_norms();
  s.metadata["tokens"] = std::to_string(counted);
  s.metadata["segment"] = std::to_string(options.segment);
  return s;
}

}  // namespace kvdice::calibrate
