#include "eval/runner.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "analyze/retention_log.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "eval/dataset.h"
#include "eval/eval_backend.h"
#include "eval/hashing.h"
#include "eval/results_store.h"
#include "policy/eviction_policy.h"

#include "kvdice_git_commit.h"  // KVDICE_GIT_COMMIT, written at build time (cmake/git_commit.cmake)

namespace kvdice::eval {
namespace {

// Bumped when generation or recording changes in a way that makes old records incomparable.
constexpr const char* kKvdiceVersion = "0.1.0";

using Clock = std::chrono::steady_clock;

void flatten(const Json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) flatten(value, prefix.empty() ? key : prefix + "." + key, out);
  } else {
    out[prefix] = j.dump();
  }
}

std::string default_cell_name(const EvalRunOptions& o, const TaskSpec& task, bool evicts, int budget) {
  const std::string model = std::filesystem::path(o.model_argument).filename().replace_extension().string();
  std::string name = fmt::format("{}.{}.{}", model, task.name, o.policy);
  if (evicts) name += fmt::format(".T{}", budget);
  return name;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60)
                   : fmt::format("{}m{:02}s", s / 60, s % 60);
}

std::string utc_iso(std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

// 128 random bits as hex: run ids from different machines never meet by chance.
std::string new_run_id() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", static_cast<uint32_t>(device()));
  return id;
}

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : raw)
    if (c == '\0') c = ' ';
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  return raw.empty() ? "unknown" : raw;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(' '));
        return name;
      }
    }
  return "unknown CPU";
}

}  // namespace

std::vector<std::string> manifest_differences(const Json& stored, const Json& requested) {
  std::map<std::string, std::string> a, b;
  flatten(stored, "", a);
  flatten(requested, "", b);
  std::vector<std::string> lines;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end())
      lines.push_back(fmt::format("{}: {} -> (absent)", key, value));
    else if (it->second != value)
      lines.push_back(fmt::format("{}: {} -> {}", key, value, it->second));
  }
  for (const auto& [key, value] : b)
    if (!a.count(key)) lines.push_back(fmt::format("{}: (absent) -> {}", key, value));
  return lines;
}

EvalRunSummary run_eval(const EvalRunOptions& o, const EvalLog& log) {
  // The run's wall time counts from here: loading the weights is part of what a cell costs.
  const auto invoked = Clock::now();
  const auto invoked_utc = std::chrono::system_clock::now();
  // Everything cheap is validated before the weights load.
  TaskSpec task = o.task;
  if (o.runs) task.runs = *o.runs;
  if (o.budget) task.budget = *o.budget;
  if (o.window) task.window = *o.window;
  if (o.max_length) task.max_length = *o.max_length;
  if (o.temperature) task.temperature = *o.temperature;
  if (o.top_p) task.top_p = *o.top_p;
  task.validate("eval run");
  if (o.long_prompt != "warn" && o.long_prompt != "error")
    fail("--long-prompt must be warn or error (got '{}')", o.long_prompt);
  if (o.limit < 0) fail("--limit must be >= 0 (got {})", o.limit);
  if (o.max_new_tokens && *o.max_new_tokens < 1)
    fail("--max-new-tokens must be >= 1 (got {})", *o.max_new_tokens);
  if (o.max_batch < 1) fail("--max-batch must be >= 1 (got {})", o.max_batch);

  const bool evicts = policy::make_policy(o.policy, "--policy")->evicts();
  if (!o.retention_log.empty() && !evicts)
    fail("--retention-log has nothing to log with policy '{}', which never evicts", o.policy);
  engine::EngineConfig config;
  config.kv.policy = o.policy;
  config.eviction_seed = o.seed;
  config.max_batch = o.max_batch;
  config.pool = o.pool;
  config.warn_each_long_prompt = false;  // one warning for the cell below, not one per (problem, run)
  if (evicts) {
    config.kv.budget = {task.budget, task.window,
                     o.long_prompt == "error" ? kv::LongPromptRule::Error : kv::LongPromptRule::Warn};
    config.kv.budget.validate();
  }

  Dataset dataset = load_dataset(o.dataset, task.grader != GraderKind::Code);
  if (task.grader == GraderKind::Code) {
    for (const auto& p : dataset.problems)
      if (!p.raw.contains("tests") || !p.raw["tests"].is_array() || p.raw["tests"].empty())
        fail("{}: problem {} has no \"tests\" array (code tasks need tests)", o.dataset.string(), p.index);
  }
  const int n_problems = o.limit > 0 ? std::min<int>(o.limit, static_cast<int>(dataset.problems.size()))
                                     : static_cast<int>(dataset.problems.size());

  engine::ModelBundle bundle = engine::load_model_bundle(o.model_path);
  auto backend = make_eval_backend(o.backend, o.threads);
  const float temperature =
      task.temperature.value_or(bundle.model->config().architecture == "Phi3ForCausalLM" ? 0.8f : 0.6f);
  engine::SamplingParams sampling{temperature, task.top_p, task.top_k, o.seed};
  sampling.validate();
  tokenizer::ChatTemplate chat_kind{};
  if (task.chat) chat_kind = engine::resolve_chat_template(bundle, "");

  Json manifest;
  manifest["kvdice_version"] = kKvdiceVersion;
  manifest["backend"] = backend->name();
  manifest["model"] = {
      {"fingerprint", model_fingerprint(o.model_path)},
      {"architecture", bundle.model->config().architecture},
      {"format", bundle.format},
      {"weight_dtype", bundle.weight_dtype},
      {"tokenizer", tokenizer_fingerprint(*bundle.tokenizer)},
      {"chat_template", task.chat ? std::string(tokenizer::chat_template_name(chat_kind)) : "none"},
      {"stop_ids", bundle.generation.eos_ids}};
  manifest["task"] = task.to_json();
  manifest["task"]["temperature"] = temperature;
  manifest["dataset"] = {{"path", dataset.path.string()},
                         {"sha256", dataset.sha256},
                         {"problems_in_file", dataset.problems.size()}};
  manifest["problems"] = n_problems;
  manifest["runs"] = task.runs;
  manifest["policy"] = {{"name", o.policy},
                        {"budget", evicts ? task.budget : 0},
                        {"window", evicts ? task.window : 0},
                        {"long_prompt", o.long_prompt},
                        {"budget_convention",
                         "reference: T = resident slots after a round, prompt and window "
                         "included; rounds every r decode tokens once len > T"}};
  manifest["sampling"] = {
      {"temperature", temperature},    {"top_p", task.top_p},
      {"top_k", task.top_k},           {"seed", o.seed},
      {"max_length", task.max_length}, {"max_new_tokens_cap", o.max_new_tokens ? *o.max_new_tokens : 0}};
  manifest["seeds"] =
      "stream id = problem * runs + run; sampling and eviction streams keyed by (seed, stream id)";

  const std::string cell = o.cell.empty() ? default_cell_name(o, task, evicts, task.budget) : o.cell;
  ResultsStore store(o.results_root, true);
  const std::string hash = config_hash(manifest);
  if (auto existing = store.find_cell(cell)) {
    if (existing->config_hash != hash) {
      const auto diff = manifest_differences(existing->manifest, manifest);
      fail(
          "cell '{}' in {} was run with another configuration; refusing to mix records. Differences "
          "(stored -> requested):\n  {}\nUse another --cell name for a new configuration.",
          cell, store.path().string(), fmt::format("{}", fmt::join(diff, "\n  ")));
    }
  } else {
    store.create_cell(cell, manifest, n_problems, task.runs);
  }

  // A shard sees only its own pairs, also when other shards' records share its root.
  const auto owned = [&](int p, int run) { return o.shard.owns(static_cast<uint64_t>(p) * task.runs + run); };
  std::set<std::pair<int, int>> done;
  for (const auto& pair : store.recorded(cell))
    if (owned(pair.first, pair.second)) done.insert(pair);
  EvalRunSummary summary;
  summary.cell = cell;
  if (!o.shard.whole()) summary.shard = o.shard.describe();
  for (int p = 0; p < n_problems; ++p)
    for (int run = 0; run < task.runs; ++run) summary.total += owned(p, run);
  summary.skipped = static_cast<int>(done.size());
  log(
      fmt::format("cell {}: {} problems x {} runs{}, {} already recorded; model {}, backend {}, policy {}, "
                  "T={} r={}, temperature {}",
                  cell, n_problems, task.runs,
                  o.shard.whole() ? std::string() : fmt::format(", shard {} ({} pairs)", summary.shard, summary.total),
                  done.size(), bundle.source, backend->name(), o.policy,
                  evicts ? task.budget : 0, evicts ? task.window : 0, temperature));

  RunInfo this_run;
  this_run.run_id = new_run_id();
  this_run.started_at = utc_iso(invoked_utc);
  this_run.backend = backend->is_cpu() ? "cpu" : "cuda";
  this_run.device =
      backend->is_cpu() ? fmt::format("{}; {}", cpu_model_name(), backend->name()) : backend->name();
  this_run.gpus = backend->is_cpu() ? 0 : 1;
  this_run.threads = o.threads > 0
                         ? o.threads
                         : (backend->is_cpu() ? static_cast<int>(std::thread::hardware_concurrency()) : 0);
  this_run.kvdice_version = kKvdiceVersion;
  this_run.git_commit = KVDICE_GIT_COMMIT;
  this_run.command_line = command_line();
  this_run.wall_seconds = std::chrono::duration<double>(Clock::now() - invoked).count();
  store.begin_run(this_run);
  summary.run_id = this_run.run_id;
  const auto wall = [&] { return std::chrono::duration<double>(Clock::now() - invoked).count(); };

  engine::Engine eng(*bundle.model, *backend, config);
  std::optional<analyze::RetentionLogWriter> retention;
  if (!o.retention_log.empty()) {
    retention.emplace(o.retention_log);
    retention->begin(eng, "eval run", bundle.source, bundle.model->config());
  }
  std::map<uint64_t, std::pair<int, int>> pending;  // engine id -> (problem, run)
  for (int p = 0; p < n_problems; ++p) {
    std::vector<int> ids;
    bool built = false;
    for (int run = 0; run < task.runs; ++run) {
      if (!owned(p, run) || done.count({p, run})) continue;
      if (!built) {
        const std::string text = dataset.problems[p].question + task.prompt_suffix;
        ids = task.chat ? engine::encode_chat_prompt(bundle, chat_kind, text, task.system, task.thinking)
                        : engine::encode_raw_prompt(bundle, text);
        if (static_cast<int>(ids.size()) >= task.max_length)
          fail("problem {} of {}: its prompt has {} tokens, not below max_length {}", p, o.dataset.string(),
               ids.size(), task.max_length);
        built = true;
      }
      engine::GenerationRequest req;
      req.prompt = ids;
      req.max_new_tokens = task.max_length - static_cast<int>(ids.size());
      if (o.max_new_tokens) req.max_new_tokens = std::min(req.max_new_tokens, *o.max_new_tokens);
      req.sampling = sampling;
      req.stop_ids = bundle.generation.eos_ids;
      req.stream_id = static_cast<uint64_t>(p) * task.runs + run;
      const int prompt_len = static_cast<int>(req.prompt.size());
      if (evicts && config.kv.budget.long_prompt_warned(prompt_len)) ++summary.long_prompts;
      const uint64_t id = eng.submit(std::move(req));
      if (retention) retention->note_prompt(id, prompt_len);
      pending[id] = {p, run};
    }
  }
  if (summary.long_prompts > 0) {
    const kv::BudgetSpec& b = config.kv.budget;
    log_warn("PROMPTS LONGER THAN THE BUDGET: cell {}: {} of the {} prompts submitted have T - r = {} tokens or "
             "more; {}",
             cell, summary.long_prompts, pending.size(), b.selection(), b.long_prompt_effect());
  }

  const auto start = Clock::now();
  auto last_progress = start;
  const int todo = static_cast<int>(pending.size());
  const bool tty = o.progress && isatty(STDERR_FILENO);
  while (!eng.idle()) {
    if (o.interrupted && o.interrupted())
      fail("cell {}: interrupted after {} new records; they are committed, run the cell again to resume", cell,
           summary.completed);
    eng.step();
    for (auto& result : eng.take_finished()) {
      const auto [problem, run] = pending.at(result.id);
      std::vector<int> visible = result.tokens;
      if (result.finish == engine::FinishReason::Stop && !visible.empty()) visible.pop_back();
      Record r;
      r.cell = cell;
      r.problem = problem;
      r.run = run;
      r.config_hash = hash;
      r.stream_id = static_cast<uint64_t>(problem) * task.runs + run;
      r.completion =
          Json(bundle.tokenizer->decode(visible)).dump(-1, ' ', false, Json::error_handler_t::replace);
      r.completion = Json::parse(r.completion).get<std::string>();  // invalid UTF-8 replaced, as JSON needs
      r.tokens_json = Json(result.tokens).dump();
      r.prompt_tokens = result.stats.prompt_tokens;
      r.generated_tokens = result.stats.generated_tokens;
      r.finish = std::string(engine::finish_reason_name(result.finish));
      r.eviction_rounds = result.stats.eviction_rounds;
      r.peak_resident_slots = result.stats.peak_resident_slots;
      r.seconds = result.stats.prefill_seconds + result.stats.decode_seconds;
      store.insert_record(r, this_run.run_id, wall());
      ++summary.completed;
      summary.generated_tokens += r.generated_tokens;
    }
    const auto now = Clock::now();
    if (tty && (now - last_progress > std::chrono::milliseconds(500) || eng.idle())) {
      last_progress = now;
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double rate = elapsed > 0 ? summary.generated_tokens / elapsed : 0.0;
      const double eta =
          summary.completed > 0 ? elapsed * (todo - summary.completed) / summary.completed : 0.0;
      fmt::print(stderr, "\r{}: {}/{} done, {:.1f} tok/s (finished sequences), ETA {}   ", cell,
                 summary.skipped + summary.completed, summary.total, rate,
                 summary.completed > 0 ? format_duration(eta) : std::string("?"));
      if (eng.idle()) fmt::print(stderr, "\n");
    }
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (retention) retention->commit();
  summary.wall_seconds = wall();
  store.finish_run(this_run.run_id, summary.wall_seconds);
  return summary;
}

}  // namespace kvdice::eval
