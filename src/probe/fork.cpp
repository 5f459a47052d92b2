#include "probe/fork.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "eval/choice_answer.h"
#include "eval/code_grader.h"
#include "eval/math_answer.h"
#include "eval/results_store.h"
#include "policy/eviction_policy.h"

namespace kvdice::probe {
namespace {

std::vector<int> token_array(const Json& j, const std::string& where) {
  if (!j.is_array()) fail("{}: not an array of token ids", where);
  std::vector<int> out;
  for (const Json& t : j) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      fail("{}: {} is not a token id", where, t.dump());
    out.push_back(t.get<int>());
  }
  return out;
}

// The task's grader on one completion, as `eval grade` scores a record (eval/grader.cpp).
eval::GradeOutcome grade(const eval::TaskSpec& task, const eval::Problem& problem, const std::string& completion) {
  switch (task.grader) {
    case eval::GraderKind::Math: {
      const auto boxed = eval::last_boxed(completion);
      if (!boxed) return {0.0, "", "no \\boxed{} answer"};
      const eval::MathVerdict verdict = eval::math_equal(*boxed, problem.answer, eval::GradeOptions{}.symbolic_timeout_s);
      return {verdict.equal ? 1.0 : 0.0, *boxed, verdict.how};
    }
    case eval::GraderKind::Choice: {
      const auto expected = eval::parse_choice_gold(problem.answer, task.choices);
      if (!expected)
        fail("problem {}: gold answer '{}' is not one of the first {} letters", problem.index, problem.answer,
             task.choices);
      const auto letter = eval::extract_choice(completion, task.choices);
      if (!letter) return {0.0, "", "no choice letter"};
      return {*letter == *expected ? 1.0 : 0.0, std::string(1, *letter), ""};
    }
    case eval::GraderKind::Code:
      return eval::grade_code(completion, problem.raw, eval::GradeOptions{});
  }
  return {};
}

// The completion a grader reads: the generated tokens without a final stop id, decoded as the eval
// runner decodes them.
std::string completion_text(const engine::ModelBundle& bundle, std::vector<int> tokens, const std::vector<int>& stop_ids) {
  if (!tokens.empty() && std::find(stop_ids.begin(), stop_ids.end(), tokens.back()) != stop_ids.end())
    tokens.pop_back();
  return bundle.tokenizer->decode(tokens);
}

// Share of sites holding every span position, and share of layers where some head does.
std::pair<double, double> holding(const kv::RoundRecord& record, std::pair<int32_t, int32_t> span) {
  int sites = 0, held = 0, layers = 0, layers_held = 0;
  for (const auto& layer : record.kept_positions) {
    bool any = false;
    for (const auto& head : layer) {
      const auto first = std::lower_bound(head.begin(), head.end(), span.first);
      const auto last = std::lower_bound(head.begin(), head.end(), span.second);
      const bool all = last - first == span.second - span.first;
      held += all;
      any = any || all;
      ++sites;
    }
    layers_held += any;
    ++layers;
  }
  return {sites ? double(held) / sites : 1.0, layers ? double(layers_held) / layers : 1.0};
}

}  // namespace

std::pair<int, int> find_generated_text(const engine::ModelBundle& bundle, const ForkTrace& trace,
                                        const std::string& text, bool last, const std::string& flag) {
  if (text.empty()) fail("{}: empty text", flag);
  std::string joined;
  std::vector<size_t> end_of;  // end offset of each generated token's text
  for (int t : trace.generated) {
    joined += bundle.tokenizer->decode(std::vector<int>{t});
    end_of.push_back(joined.size());
  }
  const size_t at = last ? joined.rfind(text) : joined.find(text);
  if (at == std::string::npos) fail("{}: '{}' does not occur in the trace's generated text", flag, text);
  const int first = static_cast<int>(std::upper_bound(end_of.begin(), end_of.end(), at) - end_of.begin());
  const int end =
      static_cast<int>(std::lower_bound(end_of.begin(), end_of.end(), at + text.size()) - end_of.begin()) + 1;
  return {first, end};
}

std::string trace_text(const engine::ModelBundle& bundle, const ForkTrace& trace, int lo, int hi) {
  std::vector<int> ids;
  const int pl = static_cast<int>(trace.prompt.size());
  for (int p = std::max(0, lo); p < hi && p < pl + static_cast<int>(trace.generated.size()); ++p)
    ids.push_back(p < pl ? trace.prompt[p] : trace.generated[p - pl]);
  // A cut through a multi-byte character: its bytes become U+FFFD, as JSON needs valid UTF-8.
  const std::string text = bundle.tokenizer->decode(ids);
  return Json::parse(Json(text).dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
}

std::pair<int32_t, int32_t> parse_span(const std::string& text) {
  const size_t dash = text.find('-');
  int32_t lo = -1, hi = -1;
  const char* end = text.data() + text.size();
  const bool ok = dash != std::string::npos &&
                  std::from_chars(text.data(), text.data() + dash, lo).ptr == text.data() + dash &&
                  std::from_chars(text.data() + dash + 1, end, hi).ptr == end && lo >= 0 && hi > lo;
  if (!ok) fail("--span: '{}' is not LO-HI with 0 <= LO < HI (absolute positions, HI excluded)", text);
  return {lo, hi};
}

ForkTrace load_generate_trace(const std::filesystem::path& path, int index) {
  const Json j = read_json_file(path);
  const Json* rec = &j;
  if (j.is_array()) {
    if (index < 0 || index >= static_cast<int>(j.size()))
      fail("{}: --index {} is outside its {} records", path.string(), index, j.size());
    rec = &j[static_cast<size_t>(index)];
  } else if (index != 0) {
    fail("{}: --index {}: the file holds one record", path.string(), index);
  }
  if (!rec->is_object() || !rec->contains("prompt_ids") || !rec->contains("generated_ids"))
    fail("{}: not a `kvdice generate --json` record (no prompt_ids and generated_ids)", path.string());
  ForkTrace t;
  t.source = path.string();
  t.prompt = token_array(rec->at("prompt_ids"), path.string() + ": prompt_ids");
  t.generated = token_array(rec->at("generated_ids"), path.string() + ": generated_ids");
  if (rec->contains("id") && rec->at("id").is_number_unsigned()) t.stream_id = rec->at("id").get<uint64_t>();
  return t;
}

ForkTrace load_eval_trace(const engine::ModelBundle& bundle, const std::filesystem::path& results_root,
                          const std::string& cell_name, int problem, int run, const std::filesystem::path& dataset) {
  eval::ResultsStore store(results_root, false);
  const eval::CellInfo cell = store.require_cell(cell_name);
  const Json& m = cell.manifest;
  const std::string where = "cell " + cell_name + " manifest";
  const eval::TaskSpec task = eval::task_from_json(m.at("task"), where);
  const eval::Record* found = nullptr;
  const std::vector<eval::Record> records = store.records(cell_name);
  for (const eval::Record& r : records)
    if (r.problem == problem && r.run == run) found = &r;
  if (!found) fail("cell {} has no record for problem {} run {}", cell_name, problem, run);
  const std::filesystem::path path =
      dataset.empty() ? std::filesystem::path(m.at("dataset").at("path").get<std::string>()) : dataset;
  const eval::Dataset data = eval::load_dataset(path, task.grader != eval::GraderKind::Code);
  if (data.sha256 != m.at("dataset").at("sha256").get<std::string>())
    fail("{}: sha256 {} differs from the one cell {} was decoded from; pass --dataset with that file",
         path.string(), data.sha256, cell_name);
  if (problem < 0 || problem >= static_cast<int>(data.problems.size()))
    fail("{}: no problem {}", path.string(), problem);

  ForkTrace t;
  t.source = fmt::format("{} cell {} problem {} run {}", results_root.string(), cell_name, problem, run);
  const std::string text = data.problems[problem].question + task.prompt_suffix;
  t.prompt = task.chat ? engine::encode_chat_prompt(bundle, engine::resolve_chat_template(bundle, ""), text,
                                                    task.system, task.thinking)
                       : engine::encode_raw_prompt(bundle, text);
  if (static_cast<int>(t.prompt.size()) != found->prompt_tokens)
    fail("cell {} problem {}: the prompt rebuilt with this model's tokenizer has {} tokens, the record {}: "
         "fork replay needs the cell's own model",
         cell_name, problem, t.prompt.size(), found->prompt_tokens);
  t.generated = token_array(Json::parse(found->tokens_json), t.source + ": tokens");
  const Json& policy = m.at("policy");
  t.policy = policy.at("name").get<std::string>();
  if (policy.at("budget").get<int>() > 0)
    t.budget = {policy.at("budget").get<int>(), policy.at("window").get<int>(),
                policy.at("long_prompt").get<std::string>() == "error" ? kv::LongPromptRule::Error
                                                                      : kv::LongPromptRule::Warn};
  const Json& s = m.at("sampling");
  t.eviction_seed = s.at("seed").get<uint64_t>();
  t.sampling = {s.at("temperature").get<float>(), s.at("top_p").get<float>(), s.at("top_k").get<int>(),
                s.at("seed").get<uint64_t>()};
  t.stream_id = found->stream_id;
  t.stop_ids = m.at("model").at("stop_ids").get<std::vector<int>>();
  t.max_generated = s.at("max_length").get<int>() - static_cast<int>(t.prompt.size());
  if (const int cap = s.at("max_new_tokens_cap").get<int>(); cap > 0) t.max_generated = std::min(t.max_generated, cap);
  t.task = task;
  t.problem = data.problems[problem];
  return t;
}

void validate_fork(const ForkTrace& trace, const ForkConfig& config) {
  const int n = static_cast<int>(trace.generated.size());
  if (trace.prompt.empty()) fail("the trace has an empty prompt");
  if (config.fork_at < 1 || config.fork_at > n)
    fail("--fork-at {} is outside the trace's generated tokens (1 to {})", config.fork_at, n);
  if (config.repetitions < 1) fail("--repetitions must be >= 1 (got {})", config.repetitions);
  if (config.max_new_tokens < 0) fail("--max-new-tokens must be >= 0 (got {})", config.max_new_tokens);
  const int fork_end = static_cast<int>(trace.prompt.size()) + config.fork_at;  // positions written by the fork
  if (config.span.first < 0 || config.span.second <= config.span.first || config.span.second > fork_end)
    fail("--span {}-{} must lie in the {} positions written by the fork (prompt {} + {} forced tokens: 0 to {})",
         config.span.first, config.span.second, fork_end, trace.prompt.size(), config.fork_at, fork_end);
  if (!trace.budget.bounded())
    fail("the trace ran without a budget, so nothing was evicted and there is no eviction to replay (a generate "
         "record needs the --budget T and --window r it was decoded with)");
  trace.budget.validate();
  if (config.span.second - config.span.first > trace.budget.selection())
    fail("--span holds {} positions, more than the {} a round keeps (T - r): it cannot be pinned",
         config.span.second - config.span.first, trace.budget.selection());
  // A malformed spec fails here.
  policy::make_policy(trace.policy, "the replayed policy (--policy, or the eval cell's)");
}

ForkSurvival fork_survival(const ForkTrace& trace, const ForkConfig& config, int kv_heads) {
  ForkSurvival out;
  out.heads = kv_heads;
  const auto policy = policy::make_policy(trace.policy);
  const std::string name(policy->name());
  const kv::BudgetSpec& b = trace.budget;
  const int prompt_len = static_cast<int>(trace.prompt.size());
  const int pl = policy->protects_prompt() ? b.protected_slots(prompt_len) : 0;
  const bool shared = name == "random_shared";
  out.analytic = name == "random_pp" || name == "random" || shared;
  out.rule = out.analytic ? fmt::format("uniform draw of T - r - pl = {} of the candidates per {} and round (pl = {})",
                                        b.selection() - pl, shared ? "layer" : "head", pl)
                          : fmt::format("{} chooses by score: no analytic keep rule", name);
  const auto [lo, hi] = config.span;
  // Decode step t (1..K-1) appends generated token t-1 at position prompt_len + t - 1; its round, if
  // due, runs before step t + 1 samples. Step K, the first that samples, reads the rounds before it.
  int length = prompt_len;
  for (int t = 1; t < config.fork_at; ++t) {
    ++length;
    const int at_token = prompt_len + t;
    if (!b.should_evict(length)) continue;
    ++out.rounds;
    // Candidates: every resident slot but the newest r; the unprotected ones are drawn from.
    const int candidates = length - b.window - pl;
    const int kept = b.selection() - pl;
    int k = 0;  // span tokens that are candidates this round
    for (int p = lo; p < hi; ++p) k += p >= pl && p < at_token - b.window;
    if (lo >= pl && lo < at_token - b.window)
      out.token_per_head *= static_cast<double>(kept) / candidates;
    if (k > 0) ++out.span_rounds;
    for (int i = 0; i < k; ++i) out.span_per_head *= static_cast<double>(std::max(0, kept - i)) / (candidates - i);
    length = b.budget;
  }
  const int h = shared ? 1 : kv_heads;
  out.token_union = 1.0 - std::pow(1.0 - out.token_per_head, h);
  out.span_union = 1.0 - std::pow(1.0 - out.span_per_head, h);
  return out;
}

ForkReport run_fork_probe(const engine::ModelBundle& bundle, backend::Backend& backend, const ForkTrace& trace,
                          const ForkConfig& config) {
  validate_fork(trace, config);
  const int k = config.fork_at;
  int after = config.max_new_tokens;
  if (after == 0) {
    const int cap = trace.max_generated > 0 ? trace.max_generated : static_cast<int>(trace.generated.size());
    after = cap - k;
    if (after < 1)
      fail("--fork-at {} leaves nothing to sample under the trace's cap of {} generated tokens; pass "
           "--max-new-tokens",
           k, cap);
  }
  ForkReport report;
  report.fork_position = static_cast<int>(trace.prompt.size()) + k - 1;
  report.span_text = trace_text(bundle, trace, config.span.first, config.span.second);
  report.fork_text = trace_text(bundle, trace, report.fork_position - 11, report.fork_position + 1);
  report.recorded_next = trace_text(bundle, trace, report.fork_position + 1, report.fork_position + 9);
  report.survival = fork_survival(trace, config, bundle.model->config().n_kv_heads);
  if (trace.task && trace.problem) {
    const eval::GradeOutcome g =
        grade(*trace.task, *trace.problem, completion_text(bundle, trace.generated, trace.stop_ids));
    report.trace_score = g.score;
    report.trace_extracted = g.extracted;
  }
  const std::string pinned = fmt::format("random_pin_pp:span={}-{},layers=all,heads=all", config.span.first,
                                         config.span.second);
  for (const auto& [arm, spec] : std::vector<std::pair<std::string, std::string>>{{"control", trace.policy},
                                                                                  {"pinned", pinned}}) {
    ForkArmResult r;
    r.arm = arm;
    r.policy = policy::describe(*policy::make_policy(spec));
    engine::EngineConfig ec;
    ec.kv = {spec, trace.budget};
    ec.eviction_seed = trace.eviction_seed;
    ec.max_batch = std::min(config.max_batch, config.repetitions);
    ec.pool = config.pool;
    engine::Engine eng(*bundle.model, backend, ec);
    // The rounds before the first sampled token are the same in every repetition (same forced tokens,
    // same eviction stream): the last of them is the state at the fork.
    std::optional<std::pair<double, double>> at_fork;
    eng.set_round_observer([&](uint64_t, const kv::RoundRecord& record) {
      if (record.at_token <= report.fork_position) at_fork = holding(record, config.span);
    });
    std::map<uint64_t, int> rep_of;
    for (int j = 0; j < config.repetitions; ++j) {
      engine::GenerationRequest req;
      req.prompt = trace.prompt;
      req.forced_tokens.assign(trace.generated.begin(), trace.generated.begin() + k);
      req.sample_after_forced = true;
      req.max_new_tokens = k + after;
      req.sampling = trace.sampling;
      req.sampling.seed = trace.sampling.seed + static_cast<uint64_t>(j);
      req.stop_ids = trace.stop_ids;
      req.stream_id = trace.stream_id;
      rep_of[eng.submit(std::move(req))] = j;
    }
    eng.run();
    auto done = eng.take_finished();
    std::sort(done.begin(), done.end(), [&](const auto& a, const auto& b) { return rep_of.at(a.id) < rep_of.at(b.id); });
    const auto state = at_fork.value_or(std::pair<double, double>{1.0, 1.0});  // no round yet: all resident
    r.sites_holding = state.first;
    r.layers_holding = state.second;
    for (const auto& f : done) {
      r.continuations.emplace_back(f.tokens.begin() + k, f.tokens.end());
      r.finish.emplace_back(engine::finish_reason_name(f.finish));
      if (trace.task && trace.problem) {
        const eval::GradeOutcome g = grade(*trace.task, *trace.problem, completion_text(bundle, f.tokens, trace.stop_ids));
        r.scores.push_back(g.score);
        r.extracted.push_back(g.extracted);
      }
    }
    report.arms.push_back(std::move(r));
  }
  return report;
}

namespace {
double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? std::nan("") : s / static_cast<double>(v.size());
}
}  // namespace

std::string fork_results_markdown(const ForkTrace& trace, const ForkConfig& config, const ForkReport& report) {
  const ForkSurvival& s = report.survival;
  std::string out = fmt::format(
      "Fork replay of {}: {} prompt + {} generated tokens; forced {} ({} under T={} r={}), then {} repetitions "
      "per arm from seed {}\n\n",
      trace.source, trace.prompt.size(), trace.generated.size(), config.fork_at, trace.policy, trace.budget.budget,
      trace.budget.window, config.repetitions, trace.sampling.seed);
  out += fmt::format("Span {}-{} ({} positions), fork at position {}: {} rounds before the first sampled token, {} "
                     "with span tokens among the candidates\n\n",
                     config.span.first, config.span.second, config.span.second - config.span.first,
                     report.fork_position, s.rounds, s.span_rounds);
  out += fmt::format("Span text: {}\nForced text ends: {}\nThe trace went on: {}\n\n", Json(report.span_text).dump(),
                     Json("..." + report.fork_text).dump(), Json(report.recorded_next + "...").dump());
  out += "| survival at the fork | one head | any of the layer's heads |\n|---|---:|---:|\n";
  if (s.analytic) {
    out += fmt::format("| analytic, oldest span token | {:.4f} | {:.4f} |\n", s.token_per_head, s.token_union);
    out += fmt::format("| analytic, whole span | {:.4f} | {:.4f} |\n", s.span_per_head, s.span_union);
  } else {
    out += "| analytic | n/a | n/a |\n";
  }
  for (const ForkArmResult& a : report.arms)
    out += fmt::format("| observed, {} (whole span) | {:.4f} | {:.4f} |\n", a.arm, a.sites_holding, a.layers_holding);
  out += fmt::format("\n({}; H = {} KV heads)\n\n", s.rule, s.heads);
  const bool graded = !report.arms.empty() && !report.arms[0].scores.empty();
  out += "| arm | policy | accuracy | scores | finish | sampled tokens (mean) |\n|---|---|---:|---|---|---:|\n";
  for (const ForkArmResult& a : report.arms) {
    std::string scores, finish;
    double tokens = 0;
    for (size_t j = 0; j < a.continuations.size(); ++j) {
      if (graded) scores += fmt::format("{}{:g}", j ? " " : "", a.scores[j]);
      finish += fmt::format("{}{}", j ? " " : "", a.finish[j]);
      tokens += static_cast<double>(a.continuations[j].size());
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {:.1f} |\n", a.arm, a.policy,
                       graded ? fmt::format("{:.3f}", mean(a.scores)) : "ungraded", graded ? scores : "-", finish,
                       tokens / static_cast<double>(std::max<size_t>(1, a.continuations.size())));
  }
  if (report.trace_score)
    out += fmt::format("\nThe trace itself: score {:g} (read '{}')\n", *report.trace_score, report.trace_extracted);
  return out;
}

Json fork_results_json(const ForkTrace& trace, const ForkConfig& config, const ForkReport& report) {
  const ForkSurvival& s = report.survival;
  Json arms = Json::array();
  for (const ForkArmResult& a : report.arms) {
    Json j{{"arm", a.arm},
           {"policy", a.policy},
           {"sites_holding_span", a.sites_holding},
           {"layers_holding_span", a.layers_holding},
           {"continuations", a.continuations},
           {"finish", a.finish}};
    if (!a.scores.empty()) {
      j["scores"] = a.scores;
      j["extracted"] = a.extracted;
      j["accuracy"] = mean(a.scores);
    }
    arms.push_back(std::move(j));
  }
  Json survival{{"rounds", s.rounds}, {"span_rounds", s.span_rounds}, {"rule", s.rule}, {"kv_heads", s.heads}};
  if (s.analytic) {
    survival["token_per_head"] = s.token_per_head;
    survival["token_union"] = s.token_union;
    survival["span_per_head"] = s.span_per_head;
    survival["span_union"] = s.span_union;
  }
  Json j{{"probe", "fork"},
         {"trace", trace.source},
         {"policy", trace.policy},
         {"budget", trace.budget.budget},
         {"window", trace.budget.window},
         {"eviction_seed", trace.eviction_seed},
         {"stream_id", trace.stream_id},
         {"sampling_seed", trace.sampling.seed},
         {"temperature", trace.sampling.temperature},
         {"fork_at", config.fork_at},
         {"fork_position", report.fork_position},
         {"span", {config.span.first, config.span.second}},
         {"span_text", report.span_text},
         {"fork_text", report.fork_text},
         {"repetitions", config.repetitions},
         {"survival", survival},
         {"arms", arms}};
  if (report.trace_score) j["trace_score"] = *report.trace_score;
  return j;
}

}  // namespace kvdice::probe
