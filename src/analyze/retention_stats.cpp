#include "analyze/retention_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"

namespace kvdice::analyze {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t parse_int(const std::string& text, const std::string& what) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) fail("{}: '{}' is not an integer", what, text);
  return v;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// A NaN-aware running mean.
struct Mean {
  double sum = 0;
  int n = 0;
  void add(double v) {
    if (!std::isnan(v)) sum += v, ++n;
  }
  double get() const { return n ? sum / n : kNaN; }
};

struct Group {
  int layer = -1;
  std::vector<HeadSite> sites;
};

struct RoundAccumulator {
  int sequences = 0;
  Mean length, generated, union_fraction, per_head, entropy, jaccard, prompt_union, prompt_per_head;
};

struct AgeAccumulator {
  std::vector<int64_t> total, union_;
  std::vector<std::vector<int64_t>> kept;  // [site][bin]
};

// Generated positions of one site: the sorted tail at or above the prompt.
std::pair<const int32_t*, const int32_t*> generated_part(const std::vector<int32_t>& kept, int prompt_len) {
  const auto* first = std::lower_bound(kept.data(), kept.data() + kept.size(), prompt_len);
  return {first, kept.data() + kept.size()};
}

double coverage_entropy(const int32_t* first, const int32_t* last, int prompt_len, int64_t generated,
                        int bins) {
  const int64_t b = std::min<int64_t>(bins, generated);
  const int64_t n = last - first;
  if (b < 2 || n == 0) return kNaN;
  std::vector<int64_t> counts(b, 0);
  for (const int32_t* p = first; p != last; ++p)
    ++counts[(static_cast<int64_t>(*p) - prompt_len) * b / generated];
  double h = 0;
  for (int64_t c : counts)
    if (c > 0) h -= (static_cast<double>(c) / n) * std::log(static_cast<double>(c) / n);
  return h / std::log(static_cast<double>(b));
}

std::string number(double v) {
  if (std::isnan(v)) return "-";
  const std::string s = fmt::format("{:.4f}", v);
  return s == "-0.0000" ? "0.0000" : s;  // a deficit of -1e-6 is no sign worth printing
}
std::string csv_number(double v) { return std::isnan(v) ? "" : fmt::format("{:.6f}", v); }
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
std::string layer_label(int layer) {
  return layer == -1 ? "sites" : layer == -2 ? "mean" : std::to_string(layer);
}
std::string age_label(const AgeBinStats& a) {
  return a.hi < 0 ? fmt::format("{}+", a.lo) : fmt::format("{}-{}", a.lo, a.hi);
}

}  // namespace

std::vector<HeadSite> parse_head_sites(const std::string& text) {
  std::vector<HeadSite> sites;
  std::set<std::pair<int, int>> seen;
  for (const std::string& item : split(text, ',')) {
    const auto parts = split(item, ':');
    if (parts.size() != 2) fail("--heads: '{}' is not LAYER:HEAD", item);
    const int64_t l = parse_int(parts[0], "--heads layer"), h = parse_int(parts[1], "--heads head");
    if (l < 0 || h < 0 || l > std::numeric_limits<int>::max() || h > std::numeric_limits<int>::max())
      fail("--heads: '{}' has a negative or huge index", item);
    if (!seen.insert({static_cast<int>(l), static_cast<int>(h)}).second)
      fail("--heads: '{}' given twice", item);
    sites.push_back({static_cast<int>(l), static_cast<int>(h)});
  }
  return sites;
}

std::vector<int64_t> parse_age_edges(const std::string& text) {
  std::vector<int64_t> edges;
  for (const std::string& item : split(text, ',')) {
    const int64_t v = parse_int(item, "--age-bins");
    if (v < 1) fail("--age-bins: edge {} is below 1 (an age is at least 1)", v);
    if (!edges.empty() && v <= edges.back())
      fail("--age-bins: edges must be strictly increasing ({} after {})", v, edges.back());
    edges.push_back(v);
  }
  return edges;
}

struct RetentionAnalyzer::State {
  std::string log;
  RetentionLogHeader header;
  RetentionStatsOptions options;
  std::vector<Group> groups;
  std::vector<std::map<uint32_t, RoundAccumulator>> per_round;
  std::vector<AgeAccumulator> ages;
  std::set<uint64_t> sequences;
  std::vector<int32_t> count;  // per position: how many of the group's sites keep it
  int rounds = 0;
};

RetentionAnalyzer::RetentionAnalyzer(std::string log, const RetentionLogHeader& header,
                                     const RetentionStatsOptions& options)
    : state_(std::make_unique<State>()) {
  state_->log = std::move(log);
  state_->header = header;
  state_->options = options;
  const std::string& log_name = state_->log;
  auto& groups = state_->groups;
  auto& per_round = state_->per_round;
  auto& ages = state_->ages;
  const RetentionLogHeader& h = header;
  if (options.age_edges.empty()) fail("no age bins");
  for (size_t i = 0; i < options.age_edges.size(); ++i)
    if (options.age_edges[i] < 1 || (i > 0 && options.age_edges[i] <= options.age_edges[i - 1]))
      fail("age bin edges must be >= 1 and strictly increasing");
  if (options.position_bins < 1) fail("position bins must be >= 1, got {}", options.position_bins);
  if (options.sites.empty()) {
    for (int l = 0; l < h.layers; ++l) {
      Group g{l, {}};
      for (int k = 0; k < h.kv_heads; ++k) g.sites.push_back({l, k});
      groups.push_back(std::move(g));
    }
  } else {
    for (const HeadSite& s : options.sites)
      if (s.layer >= h.layers || s.head >= h.kv_heads)
        fail("{}: --heads {}:{} is out of range: the log has {} layers of {} KV heads", log_name, s.layer,
             s.head, h.layers, h.kv_heads);
    groups.push_back({-1, options.sites});
  }
  const size_t n_bins = options.age_edges.size();
  per_round.resize(groups.size());
  ages.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    ages[g].total.assign(n_bins, 0);
    ages[g].union_.assign(n_bins, 0);
    ages[g].kept.assign(groups[g].sites.size(), std::vector<int64_t>(n_bins, 0));
  }
}

RetentionAnalyzer::~RetentionAnalyzer() = default;
RetentionAnalyzer::RetentionAnalyzer(RetentionAnalyzer&&) noexcept = default;

void RetentionAnalyzer::add(const RetentionRound& r) {
  const RetentionStatsOptions& options = state_->options;
  const auto& groups = state_->groups;
  auto& per_round = state_->per_round;
  auto& ages = state_->ages;
  auto& count = state_->count;
  const size_t n_bins = options.age_edges.size();
  ++state_->rounds;
  state_->sequences.insert(r.sequence);
  const int64_t n = r.at_token, pl = r.prompt_len, gen = n - pl;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& sites = groups[g].sites;
    count.assign(static_cast<size_t>(n), 0);
    RoundAccumulator& acc = per_round[g][r.round];
    Mean per_head, entropy, jaccard, prompt_per_head;
    std::vector<std::pair<const int32_t*, const int32_t*>> gens;
    for (const HeadSite& s : sites) {
      const auto& kept = r.kept[s.layer][s.head];
      for (int32_t p : kept) ++count[p];
      const auto part = generated_part(kept, static_cast<int>(pl));
      gens.push_back(part);
      const int64_t n_gen = part.second - part.first;
      per_head.add(gen > 0 ? static_cast<double>(n_gen) / gen : kNaN);
      entropy.add(gen > 0 ? coverage_entropy(part.first, part.second, static_cast<int>(pl), gen,
                                             options.position_bins)
                          : kNaN);
      prompt_per_head.add(pl > 0 ? static_cast<double>(kept.size() - n_gen) / pl : kNaN);
    }
    for (size_t i = 0; i < gens.size(); ++i) {
      for (size_t j = i + 1; j < gens.size(); ++j) {
        std::vector<int32_t> both;
        std::set_intersection(gens[i].first, gens[i].second, gens[j].first, gens[j].second,
                              std::back_inserter(both));
        const int64_t inter = static_cast<int64_t>(both.size());
        const int64_t uni = (gens[i].second - gens[i].first) + (gens[j].second - gens[j].first) - inter;
        if (uni > 0) jaccard.add(static_cast<double>(inter) / uni);
      }
    }
    int64_t union_gen = 0, union_prompt = 0;
    for (int64_t p = 0; p < n; ++p)
      if (count[p] > 0) ++(p < pl ? union_prompt : union_gen);
    ++acc.sequences;
    acc.length.add(static_cast<double>(n));
    acc.generated.add(static_cast<double>(gen));
    acc.union_fraction.add(gen > 0 ? static_cast<double>(union_gen) / gen : kNaN);
    acc.per_head.add(per_head.get());
    acc.entropy.add(entropy.get());
    acc.jaccard.add(jaccard.get());
    acc.prompt_union.add(pl > 0 ? static_cast<double>(union_prompt) / pl : kNaN);
    acc.prompt_per_head.add(prompt_per_head.get());
    // Age = n - p; bin b holds ages [edge_b, edge_{b+1}), i.e. positions (n - edge_{b+1}, n - edge_b].
    for (size_t b = 0; b < n_bins; ++b) {
      const int64_t lo_age = options.age_edges[b];
      const int64_t hi_age = b + 1 < n_bins ? options.age_edges[b + 1] : std::numeric_limits<int64_t>::max();
      const int64_t p_hi = n - lo_age;  // inclusive
      const int64_t p_lo = std::max<int64_t>(pl, hi_age > n ? 0 : n - hi_age + 1);
      if (p_hi < p_lo) continue;
      ages[g].total[b] += p_hi - p_lo + 1;
      for (int64_t p = p_lo; p <= p_hi; ++p) ages[g].union_[b] += count[p] > 0;
      for (size_t s = 0; s < sites.size(); ++s) {
        const auto [first, last] = gens[s];
        ages[g].kept[s][b] += std::upper_bound(first, last, static_cast<int32_t>(p_hi)) -
                              std::lower_bound(first, last, static_cast<int32_t>(p_lo));
      }
    }
  }
}

RetentionStats RetentionAnalyzer::finish() const {
  const RetentionStatsOptions& options = state_->options;
  const auto& groups = state_->groups;
  const auto& per_round = state_->per_round;
  const auto& ages = state_->ages;
  const size_t n_bins = options.age_edges.size();
  RetentionStats out;
  out.log = state_->log;
  out.header = state_->header;
  out.sequences = static_cast<int>(state_->sequences.size());
  out.rounds = state_->rounds;
  std::map<uint32_t, std::vector<RoundGroupStats>> rows;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& [round, a] : per_round[g]) {
      rows[round].push_back({round, groups[g].layer, a.sequences, a.length.get(), a.generated.get(),
                             a.union_fraction.get(), a.per_head.get(), a.entropy.get(), a.jaccard.get(),
                             a.prompt_union.get(), a.prompt_per_head.get()});
    }
  }
  for (auto& [round, list] : rows)
    for (auto& row : list) out.per_round.push_back(row);
  for (size_t g = 0; g < groups.size(); ++g) {
    const AgeAccumulator& a = ages[g];
    for (size_t b = 0; b < n_bins; ++b) {
      AgeBinStats s;
      s.layer = groups[g].layer;
      s.lo = options.age_edges[b];
      s.hi = b + 1 < n_bins ? options.age_edges[b + 1] : -1;
      s.positions = a.total[b];
      s.heads = static_cast<int>(groups[g].sites.size());
      if (a.total[b] == 0) {
        s.per_head = s.union_ = s.ceiling = s.ceiling_h = s.deficit = kNaN;
      } else {
        double sum = 0, miss = 1;
        for (const auto& kept : a.kept) {
          const double sh = static_cast<double>(kept[b]) / a.total[b];
          sum += sh;
          miss *= 1 - sh;
        }
        s.per_head = sum / s.heads;
        s.union_ = static_cast<double>(a.union_[b]) / a.total[b];
        s.ceiling = 1 - miss;
        s.ceiling_h = 1 - std::pow(1 - s.per_head, s.heads);
        s.deficit = s.ceiling - s.union_;
      }
      out.per_age.push_back(s);
    }
  }
  if (options.sites.empty() && groups.size() > 1) {
    for (size_t b = 0; b < n_bins; ++b) {
      Mean per_head, uni, ceiling, ceiling_h, deficit;
      for (size_t g = 0; g < groups.size(); ++g) {
        const AgeBinStats& s = out.per_age[g * n_bins + b];
        per_head.add(s.per_head), uni.add(s.union_), ceiling.add(s.ceiling), ceiling_h.add(s.ceiling_h),
            deficit.add(s.deficit);
      }
      AgeBinStats m = out.per_age[b];
      m.layer = -2;
      m.per_head = per_head.get(), m.union_ = uni.get(), m.ceiling = ceiling.get(),
      m.ceiling_h = ceiling_h.get(), m.deficit = deficit.get();
      out.per_age.push_back(m);
    }
  }
  return out;
}

RetentionStats analyze_retention(const std::string& log, const RetentionSection& section,
                                 const RetentionStatsOptions& options) {
  RetentionAnalyzer analyzer(log, section.header, options);
  for (const RetentionRound& r : section.rounds) analyzer.add(r);
  return analyzer.finish();
}

std::vector<RetentionStats> analyze_retention_log(const std::string& log,
                                                  const RetentionStatsOptions& options) {
  std::vector<RetentionAnalyzer> sections;
  read_retention_log(
      log, [&](const RetentionLogHeader& header) { sections.emplace_back(log, header, options); },
      [&](const RetentionRound& round) { sections.back().add(round); });
  std::vector<RetentionStats> out;
  for (const auto& s : sections) out.push_back(s.finish());
  return out;
}

std::string retention_markdown(const std::vector<RetentionStats>& stats,
                               const RetentionStatsOptions& options) {
  std::string md;
  for (const RetentionStats& s : stats) {
    const auto& h = s.header;
    md += fmt::format("## {} — {} policy {}{}, T={} r={}, {} layers x {} KV heads\n\n", s.log, h.source,
                      h.policy, h.policy_options.empty() ? "" : " (" + h.policy_options + ")", h.budget,
                      h.window, h.layers, h.kv_heads);
    md += fmt::format("Model {}; {} sequences, {} round records{}.\n\n", h.model, s.sequences, s.rounds,
                      options.sites.empty() ? "" : "; statistics over the chosen (layer, head) sites only");
    md += "### Per round\n\n";
    md +=
        "| round | layer | sequences | length | generated | union kept | per-head kept | coverage entropy | "
        "Jaccard | prompt union | prompt per-head |\n";
    md += "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& r : s.per_round)
      md += fmt::format("| {} | {} | {} | {:.1f} | {:.1f} | {} | {} | {} | {} | {} | {} |\n", r.round,
                        layer_label(r.layer), r.sequences, r.length, r.generated, number(r.union_fraction),
                        number(r.per_head_fraction), number(r.coverage_entropy), number(r.jaccard),
                        number(r.prompt_union), number(r.prompt_per_head));
    md += "\n### Survival by age (generated positions, pooled over rounds and sequences)\n\n";
    md +=
        "| layer | age | positions | heads | per-head s | union | ceiling 1-prod(1-s_h) | 1-(1-s)^H | "
        "deficit |\n";
    md += "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& a : s.per_age)
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", layer_label(a.layer),
                        age_label(a), a.positions, a.heads, number(a.per_head), number(a.union_),
                        number(a.ceiling), number(a.ceiling_h), number(a.deficit));
    md += "\n";
  }
  return md;
}

std::string retention_csv(const std::vector<RetentionStats>& stats) {
  std::string csv =
      "log,policy,budget,window,table,round,layer,sequences,length,generated,union,per_head,coverage_entropy,"
      "jaccard,prompt_union,prompt_per_head,age_lo,age_hi,positions,heads,ceiling,ceiling_h,deficit\n";
  for (const RetentionStats& s : stats) {
    const std::string prefix = fmt::format("{},{},{},{}", csv_field(s.log), csv_field(s.header.policy),
                                           s.header.budget, s.header.window);
    for (const auto& r : s.per_round)
      csv += fmt::format("{},round,{},{},{},{},{},{},{},{},{},{},{},,,,,,,\n", prefix, r.round,
                         layer_label(r.layer), r.sequences, csv_number(r.length), csv_number(r.generated),
                         csv_number(r.union_fraction), csv_number(r.per_head_fraction),
                         csv_number(r.coverage_entropy), csv_number(r.jaccard), csv_number(r.prompt_union),
                         csv_number(r.prompt_per_head));
    for (const auto& a : s.per_age)
      csv += fmt::format("{},age,,{},,,,{},{},,,,,{},{},{},{},{},{},{}\n", prefix, layer_label(a.layer),
                         csv_number(a.union_), csv_number(a.per_head), a.lo,
                         a.hi < 0 ? "" : std::to_string(a.hi), a.positions, a.heads, csv_number(a.ceiling),
                         csv_number(a.ceiling_h), csv_number(a.deficit));
  }
  return csv;
}

}  // namespace kvdice::analyze
