#include "probe/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "core/philox.h"
#include "engine/engine.h"
#include "kv/budget.h"
#include "policy/eviction_policy.h"

namespace kvdice::probe {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string span_text(const std::vector<std::pair<int32_t, int32_t>>& spans) {
  std::string out;
  for (const auto& [lo, hi] : spans) out += fmt::format("{}{}-{}", out.empty() ? "" : "+", lo, hi);
  return out;
}

// Share of (layer, head) sites whose kept positions hold every position of every span.
double sites_holding(const kv::RoundRecord& record, const std::vector<std::pair<int32_t, int32_t>>& spans) {
  int sites = 0, holding = 0;
  for (const auto& layer : record.kept_positions) {
    for (const auto& head : layer) {
      ++sites;
      bool all = true;
      for (const auto& [lo, hi] : spans) {
        const auto first = std::lower_bound(head.begin(), head.end(), lo);
        const auto last = std::lower_bound(head.begin(), head.end(), hi);
        all = all && last - first == hi - lo;  // positions are distinct and sorted
      }
      holding += all;
    }
  }
  return sites ? static_cast<double>(holding) / sites : 1.0;
}

double ratio_of_means(const std::vector<double>& arm, const std::vector<double>& kept,
                      const std::vector<double>& deleted, const std::vector<int>& index) {
  double num = 0.0, den = 0.0;
  for (int i : index) {
    num += arm[i] - deleted[i];
    den += kept[i] - deleted[i];
  }
  return den != 0.0 ? num / den : kNaN;
}

}  // namespace

std::pair<double, double> percentile_interval(std::vector<double> values, double confidence) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }), values.end());
  if (values.empty()) return {kNaN, kNaN};
  std::sort(values.begin(), values.end());
  auto quantile = [&](double q) {
    const double at = q * static_cast<double>(values.size() - 1);
    const size_t below = static_cast<size_t>(std::floor(at));
    const size_t above = std::min(below + 1, values.size() - 1);
    return values[below] + (at - static_cast<double>(below)) * (values[above] - values[below]);
  };
  return {quantile((1.0 - confidence) / 2.0), quantile((1.0 + confidence) / 2.0)};
}

std::string synth_arm_policy(const std::string& arm, const std::vector<std::pair<int32_t, int32_t>>& spans) {
  const std::string span = "span=" + span_text(spans);
  std::string spec;
  if (arm == "kept") {
    spec = "random_pin_pp:" + span + ",layers=all,heads=all";
  } else if (arm == "deleted") {
    spec = "random_pin_pp:" + span + ",heads=none";
  } else if (arm.starts_with("pin:") || arm == "pin" || arm.starts_with("deal:")) {
    const bool deal = arm.starts_with("deal:");
    const std::string options = arm.substr(std::min(arm.size(), size_t{deal ? 5u : 4u}));
    if (options.find("span=") != std::string::npos || options.find("deal=") != std::string::npos)
      fail("--arms: arm '{}': a pin or deal arm takes layers= and heads= only; its span is the cell's fact", arm);
    spec = "random_pin_pp:" + span + (options.empty() ? "" : "," + options) + (deal ? ",deal=1" : "");
  } else {
    spec = arm;
  }
  try {
    return policy::describe(*policy::make_policy(spec));
  } catch (const Error& e) {
    fail("--arms: unknown or malformed arm '{}' (arms are kept, deleted, pin:heads=...,layers=..., "
         "deal:heads=I+J+..., or a policy spec): {}",
         arm, e.what());
  }
}

void validate_synth_config(const SynthConfig& config) {
  if (config.task.instances < 1) fail("--instances must be >= 1 (got {})", config.task.instances);
  if (config.bootstrap < 0) fail("--bootstrap must be >= 0 (got {})", config.bootstrap);
  if (!(config.confidence > 0.0 && config.confidence < 1.0))
    fail("--confidence must be in (0, 1) (got {})", config.confidence);
  kv::BudgetSpec{config.budget, config.window}.validate();
  if (config.cells.empty()) fail("--cells is empty");
  if (config.arms.empty()) fail("--arms is empty");
  std::set<std::string> seen;
  for (const std::string& cell : config.cells) {
    parse_synth_cell(cell);
    if (!seen.insert(cell).second) fail("--cells: cell '{}' given twice", cell);
  }
  seen.clear();
  for (const std::string& arm : config.arms) {
    synth_arm_policy(arm, {{1, 2}});
    if (!seen.insert(arm).second) fail("--arms: arm '{}' given twice", arm);
  }
  if (config.task.filler_path.empty())
    fail("probe synth: --filler FILE is required (configs/synth/filler.txt ships with kvdice)");
}

SynthReport run_synth_probe(const engine::ModelBundle& bundle, backend::Backend& backend, const SynthConfig& config,
                            const std::function<void(const SynthArmResult&)>& on_arm_done) {
  validate_synth_config(config);
  const int64_t longest_context = std::max(bundle.model->config().max_position, 4096);
  std::vector<SynthTask> tasks;
  for (const std::string& name : config.cells)
    tasks.push_back(build_synth_task(bundle, config.task, parse_synth_cell(name), longest_context));

  // The stub must fit below the budget (the engine refuses it otherwise), and a span kept in a site must
  // leave the round slots to keep beside it.
  for (const SynthTask& task : tasks) {
    const int stub = static_cast<int>(task.instances.front().prompt.size());
    int span_tokens = 0;
    for (const auto& [lo, hi] : task.spans) span_tokens += hi - lo;
    if (stub >= config.budget - config.window)
      fail("probe synth: the {}-token prompt stub needs --budget - --window above it (T={}, r={}); raise --budget",
           stub, config.budget, config.window);
    if (stub + span_tokens >= config.budget - config.window)
      fail("probe synth: cell {}: the {}-token stub and {} fact tokens leave no room in the {} slots a round keeps "
           "(T - r); raise --budget",
           task.cell.name, stub, span_tokens, config.budget - config.window);
    // A site that drops the span still keeps T - r of a round's T candidates: only r can go.
    bool drops = false;
    for (const std::string& arm : config.arms)
      drops |= arm == "deleted" || arm == "pin" || arm.starts_with("pin:") || arm.starts_with("deal:");
    if (drops && span_tokens > config.window)
      fail("probe synth: cell {}: its fact spans hold {} tokens, more than the window r={}; a round drops only r "
           "of its candidates, so a site cannot drop them all; raise --window",
           task.cell.name, span_tokens, config.window);
  }

  SynthReport report;
  if (config.parity) {
    // The first instance twice with every token kept: teacher-forced from the stub, and with everything
    // before the first value token prefilled at once. The value tokens' log-probabilities must agree.
    const SynthInstance& inst = tasks.front().instances.front();
    engine::EngineConfig ec;
    ec.kv.budget = {};
    ec.kv.policy = "full";
    ec.max_batch = 2;
    ec.pool = config.pool;
    engine::Engine eng(*bundle.model, backend, ec);
    engine::GenerationRequest forced;
    forced.prompt = inst.prompt;
    forced.forced_tokens = inst.forced;
    engine::GenerationRequest prefilled;
    const int first = inst.value_steps.front();
    prefilled.prompt = inst.prompt;
    prefilled.prompt.insert(prefilled.prompt.end(), inst.forced.begin(), inst.forced.begin() + first);
    prefilled.forced_tokens.assign(inst.forced.begin() + first, inst.forced.end());
    const uint64_t a = eng.submit(std::move(forced));
    eng.submit(std::move(prefilled));
    eng.run();
    auto done = eng.take_finished();
    std::sort(done.begin(), done.end(), [&](const auto& x, const auto& y) { return (x.id == a) > (y.id == a); });
    report.parity.checked = true;
    for (int step : inst.value_steps) {
      const double d = std::abs(static_cast<double>(done[0].forced_logprobs[step]) -
                                static_cast<double>(done[1].forced_logprobs[step - first]));
      report.parity.max_abs_delta = std::max(report.parity.max_abs_delta, d);
    }
    if (!(report.parity.max_abs_delta <= config.parity_tolerance))
      fail("probe synth: teacher forcing and one-shot prefill disagree by {:.4f} nats on a value token (tolerance "
           "{}); the forced path is not the model's own",
           report.parity.max_abs_delta, config.parity_tolerance);
  }

  for (size_t c = 0; c < tasks.size(); ++c) {
    const SynthTask& task = tasks[c];
    const size_t cell_begin = report.results.size();
    for (const std::string& arm : config.arms) {
      SynthArmResult r;
      r.cell = task.cell.name;
      r.arm = arm;
      r.policy = synth_arm_policy(arm, task.spans);
      engine::EngineConfig ec;
      ec.kv.budget = {config.budget, config.window, kv::LongPromptRule::Error};
      ec.kv.policy = r.policy;
      ec.eviction_seed = config.task.seed;
      ec.max_batch = static_cast<int>(task.instances.size());
      ec.pool = config.pool;
      engine::Engine eng(*bundle.model, backend, ec);
      std::map<uint64_t, size_t> instance_of;
      std::vector<double> survival(task.instances.size(), 1.0);  // no round before the query: all resident
      eng.set_round_observer([&](uint64_t id, const kv::RoundRecord& record) {
        const size_t i = instance_of.at(id);
        const SynthInstance& inst = task.instances[i];
        if (record.at_token <= static_cast<int64_t>(inst.prompt.size()) + inst.value_steps.front())
          survival[i] = sites_holding(record, task.spans);
      });
      for (size_t i = 0; i < task.instances.size(); ++i) {
        engine::GenerationRequest req;
        req.prompt = task.instances[i].prompt;
        req.forced_tokens = task.instances[i].forced;
        req.stream_id = i;  // the same eviction stream for instance i in every arm
        instance_of[eng.submit(std::move(req))] = i;
      }
      eng.run();
      auto finished = eng.take_finished();
      std::sort(finished.begin(), finished.end(), [&](const auto& x, const auto& y) {
        return instance_of.at(x.id) < instance_of.at(y.id);
      });
      for (const auto& f : finished) {
        const SynthInstance& inst = task.instances[instance_of.at(f.id)];
        double lp = 0.0;
        bool ok = true;
        for (int step : inst.value_steps) {
          lp += f.forced_logprobs[step];
          ok = ok && f.forced_is_argmax[step];
        }
        r.value_logprobs.push_back(lp);
        r.retrieved.push_back(ok);
        r.mean_rounds += f.stats.eviction_rounds;
      }
      r.span_survival = survival;
      r.mean_rounds /= static_cast<double>(finished.size());
      if (on_arm_done) on_arm_done(r);
      report.results.push_back(std::move(r));
    }

    // Point estimates and the percentile bootstrap over instances, the same resampled instances for
    // every arm of the cell (R pairs each arm with the endpoints instance by instance).
    const int n = static_cast<int>(task.instances.size());
    auto find_arm = [&](const char* name) -> const SynthArmResult* {
      for (size_t k = cell_begin; k < report.results.size(); ++k)
        if (report.results[k].arm == name) return &report.results[k];
      return nullptr;
    };
    const SynthArmResult* kept = find_arm("kept");
    const SynthArmResult* deleted = find_arm("deleted");
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    auto stats = [&](const SynthArmResult& r, const std::vector<int>& index, double out[3]) {
      double lp = 0.0, ok = 0.0;
      for (int i : index) {
        lp += r.value_logprobs[i];
        ok += r.retrieved[i] ? 1.0 : 0.0;
      }
      out[0] = lp / index.size();
      out[1] = ok / index.size();
      out[2] = kept && deleted ? ratio_of_means(r.value_logprobs, kept->value_logprobs, deleted->value_logprobs, index)
                               : kNaN;
    };
    const size_t arms = report.results.size() - cell_begin;
    std::vector<std::vector<double>> draws(arms * 3);
    const PhiloxKey key = philox_key(config.bootstrap_seed, c, RngDomain::Sampling);
    std::vector<int> index(n);
    for (int b = 0; b < config.bootstrap; ++b) {
      const PhiloxStream stream{key, static_cast<uint32_t>(b), 0, 0};
      for (int i = 0; i < n; ++i) index[i] = static_cast<int>(stream.uniform_below(i, n));
      for (size_t k = 0; k < arms; ++k) {
        double out[3];
        stats(report.results[cell_begin + k], index, out);
        for (int m = 0; m < 3; ++m) draws[k * 3 + m].push_back(out[m]);
      }
    }
    for (size_t k = 0; k < arms; ++k) {
      SynthArmResult& r = report.results[cell_begin + k];
      double point[3];
      stats(r, all, point);
      Interval* targets[3] = {&r.logprob, &r.retrieval, &r.recall};
      for (int m = 0; m < 3; ++m) {
        const auto [lo, hi] = config.bootstrap > 0 ? percentile_interval(draws[k * 3 + m], config.confidence)
                                                   : std::pair<double, double>{kNaN, kNaN};
        *targets[m] = {point[m], std::isnan(point[m]) ? kNaN : lo, std::isnan(point[m]) ? kNaN : hi};
      }
    }
  }
  return report;
}

namespace {

std::string cell_text(const Interval& v, const char* format) {
  if (std::isnan(v.value)) return "n/a";
  if (std::isnan(v.lo)) return fmt::format(fmt::runtime(format), v.value);
  return fmt::format(fmt::runtime(format), v.value) + " [" + fmt::format(fmt::runtime(format), v.lo) + ", " +
         fmt::format(fmt::runtime(format), v.hi) + "]";
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? kNaN : s / static_cast<double>(v.size());
}

std::string number(double v) { return std::isnan(v) ? "" : fmt::format("{:.6g}", v); }

}  // namespace

std::string synth_results_markdown(const SynthConfig& config, const SynthReport& report) {
  std::vector<std::string> cells, arms;
  for (const auto& r : report.results) {
    if (std::find(cells.begin(), cells.end(), r.cell) == cells.end()) cells.push_back(r.cell);
    if (std::find(arms.begin(), arms.end(), r.arm) == arms.end()) arms.push_back(r.arm);
  }
  auto lookup = [&](const std::string& cell, const std::string& arm) -> const SynthArmResult* {
    for (const auto& r : report.results)
      if (r.cell == cell && r.arm == arm) return &r;
    return nullptr;
  };
  std::string out;
  auto table = [&](const std::string& title, auto value) {
    out += fmt::format("\n{}\n\n| cell | rounds |", title);
    for (const auto& a : arms) out += " " + a + " |";
    out += "\n|---|---|";
    for (size_t k = 0; k < arms.size(); ++k) out += "---|";
    out += "\n";
    for (const auto& cell : cells) {
      const SynthArmResult* first = lookup(cell, arms.front());
      out += fmt::format("| {} | {:.0f} |", cell, first ? first->mean_rounds : 0.0);
      for (const auto& a : arms) {
        const SynthArmResult* r = lookup(cell, a);
        out += " " + (r ? value(*r) : std::string("")) + " |";
      }
      out += "\n";
    }
  };
  const int pct = static_cast<int>(std::lround(config.confidence * 100));
  table(fmt::format("Recall R (ratio of means against the kept and deleted endpoints, {}% bootstrap CI)", pct),
        [](const SynthArmResult& r) { return cell_text(r.recall, "{:.3f}"); });
  table(fmt::format("Retrieval (greedy argmax right at every value token, {}% CI)", pct),
        [](const SynthArmResult& r) { return cell_text(r.retrieval, "{:.3f}"); });
  table(fmt::format("Mean value log-prob (nats, summed over the value tokens, {}% CI)", pct),
        [](const SynthArmResult& r) { return cell_text(r.logprob, "{:.2f}"); });
  table("Span survival (share of (layer, head) sites holding the whole fact at the query)",
        [](const SynthArmResult& r) { return fmt::format("{:.3f}", mean(r.span_survival)); });
  if (report.parity.checked)
    out += fmt::format("\nParity: teacher forcing vs one-shot prefill, max |delta log p| over the value tokens = "
                       "{:.2e} nats\n",
                       report.parity.max_abs_delta);
  return out;
}

std::string synth_results_csv(const SynthReport& report) {
  std::string out =
      "cell,arm,policy,instances,mean_rounds,mean_value_logprob,logprob_lo,logprob_hi,retrieval,retrieval_lo,"
      "retrieval_hi,recall,recall_lo,recall_hi,span_survival\n";
  for (const auto& r : report.results) {
    out += fmt::format("{},\"{}\",\"{}\",{},{},{},{},{},{},{},{},{},{},{},{}\n", r.cell, r.arm, r.policy,
                       r.value_logprobs.size(), number(r.mean_rounds), number(r.logprob.value), number(r.logprob.lo),
                       number(r.logprob.hi), number(r.retrieval.value), number(r.retrieval.lo),
                       number(r.retrieval.hi), number(r.recall.value), number(r.recall.lo), number(r.recall.hi),
                       number(mean(r.span_survival)));
  }
  return out;
}

Json synth_results_json(const SynthConfig& config, const SynthReport& report) {
  auto interval = [](const Interval& v) -> Json {
    if (std::isnan(v.value)) return nullptr;
    Json j{{"value", v.value}};
    if (!std::isnan(v.lo)) {
      j["lo"] = v.lo;
      j["hi"] = v.hi;
    }
    return j;
  };
  Json results = Json::array();
  for (const auto& r : report.results) {
    results.push_back({{"cell", r.cell},
                       {"arm", r.arm},
                       {"policy", r.policy},
                       {"mean_rounds", r.mean_rounds},
                       {"mean_value_logprob", interval(r.logprob)},
                       {"retrieval", interval(r.retrieval)},
                       {"recall", interval(r.recall)},
                       {"span_survival", mean(r.span_survival)},
                       {"value_logprobs", r.value_logprobs},
                       {"retrieved", r.retrieved}});
  }
  Json j{{"probe", "synth"},
         {"budget", config.budget},
         {"window", config.window},
         {"instances", config.task.instances},
         {"pre_tokens", config.task.pre_tokens},
         {"seed", config.task.seed},
         {"bootstrap", config.bootstrap},
         {"bootstrap_seed", config.bootstrap_seed},
         {"confidence", config.confidence},
         {"cells", config.cells},
         {"arms", config.arms},
         {"results", results}};
  if (report.parity.checked) j["parity_max_abs_delta"] = report.parity.max_abs_delta;
  return j;
}

}  // namespace kvdice::probe
