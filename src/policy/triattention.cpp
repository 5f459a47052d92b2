// triattention (docs/reference.md §2; the reference's `triattn_ph`, its verbatim port of TriAttention's
// per_head_pruning): one keep-set per KV head, shared by every layer, computed once per round from
// calibration statistics (triattention_stats.h) instead of observed queries; the prompt is pinned.
//
// Reference formula, per (layer L, query head h, candidate key k at absolute position p), bands f with
// RoPE frequency ω_f and magnitude s_f, the key un-rotated by p (k̃_f = k_f · e^{-i p ω_f}):
//   amp_f = |E q_f| |k̃_f|,  φ_f = arg(E q_f · conj(k̃_f)),  extra_f = (E|q_f| − |E q_f|) |k̃_f|
//   score = mean_{d ∈ {1, 2, 4, …, 65536}} Σ_f amp_f s_f² cos((R − p + d) ω_f + φ_f) + Σ_f extra_f s_f²
// with R = tokens appended so far. Since amp_f e^{iφ_f} = E q_f · conj(k̃_f) and k̃_f e^{i p ω_f} = k_f,
// the trigonometric term equals Σ_f Re(W_f · conj(k_f)) with W_f = s_f² E q_f e^{i R ω_f} · mean_d e^{i d
// ω_f}: a dot product of the post-RoPE key with a vector computed once per (layer, query head, round). This
// file uses that identity (exact in real arithmetic; one multiply-add per key element instead of 17
// cosines per band); tools/make_policy_goldens.py evaluates the formula above literally.
// Then per (layer, query head): z-normalise over the unprotected candidates (population std, clamped at
// 1e-6; skipped with fewer than 2), max over the GQA group, mean over layers; top K_sel after the prompt.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <memory>

#include "policy/policy_options.h"
#include "policy/ranking.h"
#include "policy/triattention_stats.h"

namespace kvdice::policy {
namespace {

class TriAttentionPolicy final : public EvictionPolicy {
 public:
  explicit TriAttentionPolicy(PolicyOptions& options)
      : path_(options.get_string("stats", "")),
        max_offset_(options.get_int("max_offset", 65536, 1, 1 << 30)) {
    if (path_.empty())
      fail(
          "policy 'triattention' needs calibration statistics of the model: pass "
          "--policy triattention:stats=FILE (made by kvdice calibrate --model M --text T --out FILE)");
    stats_ = read_triattention_stats(path_);
    for (int64_t d = 1; d <= max_offset_; d *= 2) offsets_.push_back(static_cast<double>(d));
  }
  std::string_view name() const override { return "triattention"; }
  std::string_view summary() const override {
    return "TriAttention: prompt + one keep-set per KV head shared by all layers, scored from calibrated "
           "query statistics";
  }
  bool protects_prompt() const override { return true; }
  std::string options() const override { return fmt::format("stats={},max_offset={}", path_, max_offset_); }
  void check_model(const ModelFingerprint& model) const override { check_stats_match(stats_, model, path_); }
  bool scores_whole_round() const override { return true; }

  std::vector<double> score_round(const RoundKeys& in) const override {
    const TriAttentionStats& s = stats_;
    if (in.n_layers != s.n_layers || in.n_kv_heads != s.n_kv_heads || in.head_dim != s.head_dim)
      fail("TriAttention statistics {} are for {} layers, {} KV heads of dim {}; the cache has {}, {}, {}",
           path_, s.n_layers, s.n_kv_heads, s.head_dim, in.n_layers, in.n_kv_heads, in.head_dim);
    const int n = in.n_candidates, nf = s.bands(), group = s.n_heads / s.n_kv_heads, pl = in.n_protected;
    // mean_d e^{i d ω_f}, and e^{i R ω_f} (R in double: exact positions, unlike an fp32 phase).
    std::vector<std::complex<double>> rotate(static_cast<size_t>(nf));
    for (int f = 0; f < nf; ++f) {
      std::complex<double> mean = 0.0;
      for (double d : offsets_) mean += std::polar(1.0, d * s.omega[f]);
      mean /= static_cast<double>(offsets_.size());
      const double fs2 = double{s.freq_scale[f]} * s.freq_scale[f];
      rotate[f] = fs2 * std::polar(1.0, static_cast<double>(in.appended) * s.omega[f]) * mean;
    }
    std::vector<double> total(static_cast<size_t>(s.n_kv_heads) * n, 0.0), head(static_cast<size_t>(n)),
        best(static_cast<size_t>(n));
    std::vector<double> w(static_cast<size_t>(in.head_dim)), extra(static_cast<size_t>(nf));
    for (int layer = 0; layer < s.n_layers; ++layer) {
      for (int kv = 0; kv < s.n_kv_heads; ++kv) {
        for (int slot = 0; slot < n; ++slot)
          if (in.position(layer, kv, slot) != in.position(0, kv, slot))
            fail(
                "triattention: layer {} KV head {} slot {} holds position {}, layer 0 holds {}; its "
                "keep-sets are "
                "shared by all layers, so every layer must hold the same tokens",
                layer, kv, slot, in.position(layer, kv, slot), in.position(0, kv, slot));
        std::fill(best.begin(), best.end(), -INFINITY);
        for (int g = 0; g < group; ++g) {
          const int qh = kv * group + g;
          for (int f = 0; f < nf; ++f) {
            const int64_t i = s.index(layer, qh, f);
            const std::complex<double> eq(s.q_mean_real[i], s.q_mean_imag[i]);
            const std::complex<double> wf = eq * rotate[f];
            // Re(W · conj(k)) = W.re k.re + W.im k.im with k.re = dim f, k.im = dim f + D/2.
            w[f] = wf.real();
            w[f + nf] = wf.imag();
            extra[f] = (double{s.q_abs_mean[i]} - std::abs(eq)) * s.freq_scale[f] * s.freq_scale[f];
          }
          for (int slot = 0; slot < n; ++slot) {
            const float* k = in.key(layer, kv, slot);
            double score = 0.0;
            for (int f = 0; f < nf; ++f)
              score += w[f] * k[f] + w[f + nf] * k[f + nf] +
                       extra[f] * std::hypot(double{k[f]}, double{k[f + nf]});
            head[slot] = score;
          }
          normalise(head, pl);
          for (int slot = 0; slot < n; ++slot) best[slot] = std::max(best[slot], head[slot]);
        }
        for (int slot = 0; slot < n; ++slot)
          total[static_cast<size_t>(kv) * n + slot] += best[slot] / s.n_layers;
      }
    }
    return total;
  }

  // The statistics as the CUDA round scorer reads them (policy/cuda/triattention.cu): per (layer, query
  // head, band) E q_f and extra_f, then per band mean_d e^{i d ω_f}, ω_f and s_f², each computed here
  // exactly as score_round() computes it.
  DeviceTable device_table() const override {
    const TriAttentionStats& s = stats_;
    const int nf = s.bands();
    DeviceTable table;
    table.layers = s.n_layers;
    table.heads = s.n_heads;
    table.kv_heads = s.n_kv_heads;
    table.head_dim = s.head_dim;
    table.values.reserve(static_cast<size_t>(s.n_layers) * s.n_heads * nf * 3 + static_cast<size_t>(nf) * 4);
    for (int layer = 0; layer < s.n_layers; ++layer)
      for (int h = 0; h < s.n_heads; ++h)
        for (int f = 0; f < nf; ++f) {
          const int64_t i = s.index(layer, h, f);
          const std::complex<double> eq(s.q_mean_real[i], s.q_mean_imag[i]);
          table.values.push_back(eq.real());
          table.values.push_back(eq.imag());
          table.values.push_back((double{s.q_abs_mean[i]} - std::abs(eq)) * s.freq_scale[f] *
                                 s.freq_scale[f]);
        }
    for (int f = 0; f < nf; ++f) {
      std::complex<double> mean = 0.0;
      for (double d : offsets_) mean += std::polar(1.0, d * s.omega[f]);
      mean /= static_cast<double>(offsets_.size());
      table.values.push_back(mean.real());
      table.values.push_back(mean.imag());
      table.values.push_back(static_cast<double>(s.omega[f]));
      table.values.push_back(double{s.freq_scale[f]} * s.freq_scale[f]);
    }
    return table;
  }

  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    KVDICE_CHECK(static_cast<int>(input.round_score.size()) == input.n_candidates,
                 "triattention got {} round scores for {} candidates", input.round_score.size(),
                 input.n_candidates);
    keep_prompt_and_highest<double>(input, input.round_score, keep);
  }

 private:
  // z-score over the unprotected candidates [pl, n) (the reference's decode-only statistics).
  static void normalise(std::vector<double>& v, int pl) {
    const int m = static_cast<int>(v.size()) - pl;
    if (m < 2) return;
    double mean = 0.0, var = 0.0;
    for (int i = pl; i < static_cast<int>(v.size()); ++i) mean += v[i];
    mean /= m;
    for (int i = pl; i < static_cast<int>(v.size()); ++i) var += (v[i] - mean) * (v[i] - mean);
    const double sd = std::max(std::sqrt(var / m), 1e-6);
    for (double& x : v) x = (x - mean) / sd;
  }

  std::string path_;
  int max_offset_;
  std::vector<double> offsets_;
  TriAttentionStats stats_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_triattention_policy(PolicyOptions& options) {
  return std::make_unique<TriAttentionPolicy>(options);
}

}  // namespace kvdice::policy
