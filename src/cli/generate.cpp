// `kvdice generate`: chat-templated or raw generation for one or more prompts under a KV budget.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "analyze/retention_log.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "engine/run_summary.h"

namespace kvdice::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_files;
  bool chat = false;
  bool no_think = false;
  std::string system;
  std::string chat_template;
  std::string policy = "random_pp";
  int budget = 0;
  int window = 64;
  std::string long_prompt = "warn";
  uint64_t seed = 0;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  int max_new_tokens = 256;
  int samples = 1;
  int max_batch = 0;
  int max_context = 0;
  std::string special_tokens = "parse";
  bool ignore_eos = false;
  backend::BackendOptions backend;
  kv::PoolRequest pool;
  bool json = false;
  bool quiet = false;
  std::string retention_log;
};

constexpr uint64_t kMaxPromptFileBytes = uint64_t{64} << 20;

// Flags that would be silently ignored, or that make no sense together, are refused here, before any
// weights load; flags that are merely redundant get a warning.
void check_flag_combinations(const GenerateOptions& o, const CLI::App& cmd) {
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  if (!o.chat) {
    for (const char* flag : {"--chat-template", "--system", "--no-think"}) {
      if (given(flag)) fail("{} only applies with --chat (the prompt is otherwise sent raw)", flag);
    }
  } else if (given("--special-tokens")) {
    fail(
        "--special-tokens applies to raw prompts; with --chat the template's special tokens are always "
        "parsed");
  }
  if (o.policy == "full") {
    for (const char* flag : {"--budget", "--window", "--long-prompt"}) {
      if (given(flag)) fail("{} has no effect with --policy full, which never evicts", flag);
    }
    if (given("--retention-log"))
      fail("--retention-log has nothing to log with --policy full, which never evicts");
  }
  if (o.temperature == 0.0f) {
    for (const char* flag : {"--top-p", "--top-k"}) {
      if (given(flag)) fail("{} has no effect with greedy decoding (--temperature 0)", flag);
    }
    if (o.samples > 1)
      fmt::print(stderr, "kvdice: warning: --samples {} with greedy decoding gives identical samples\n",
                 o.samples);
  }
}

void run_generate(const GenerateOptions& o, const CLI::App& cmd) {
  check_flag_combinations(o, cmd);
  std::vector<std::string> texts = o.prompts;
  for (const auto& f : o.prompt_files) texts.push_back(read_user_text_file(f, kMaxPromptFileBytes));
  if (texts.empty()) fail("no prompt: pass --prompt TEXT or --prompt-file FILE");

  engine::EngineConfig config;
  config.kv.budget = {o.budget, o.window,
                   o.long_prompt == "error" ? kv::LongPromptRule::Error : kv::LongPromptRule::Warn};
  config.kv.policy = o.policy;
  config.eviction_seed = o.seed;
  const int64_t n_sequences_wanted = static_cast<int64_t>(texts.size()) * o.samples;
  if (o.max_batch < 0) fail("--max-batch must be >= 0 (0 = all sequences at once), got {}", o.max_batch);
  config.max_batch =
      static_cast<int>(std::min<int64_t>(o.max_batch > 0 ? o.max_batch : n_sequences_wanted, kMaxBatch));
  if (o.max_context < 0)
    fail("--max-context must be >= 0 (0 = the model's maximum position), got {}", o.max_context);
  config.max_context = o.max_context;
  config.pool = o.pool;
  config.warn_each_long_prompt = false;  // one warning a prompt below, whatever --samples
  // Validate the cheap things before loading weights.
  auto policy = policy::make_policy(o.policy, "--policy");
  if (policy->evicts()) {
    if (o.budget <= 0) fail("policy '{}' needs --budget T (T > r, T a multiple of r = --window)", o.policy);
    config.kv.budget.validate();
  }
  engine::SamplingParams sampling{o.temperature, o.top_p, o.top_k, o.seed};
  sampling.validate();

  const auto model_path = resolve_model_argument(o.model);
  auto backend = backend::make_backend(o.backend);
  engine::ModelBundle bundle = engine::load_model_bundle(model_path, {backend->block_weight_types()});
  engine::Engine eng(*bundle.model, *backend, config);

  std::vector<int> stop_ids = bundle.generation.eos_ids;
  std::vector<std::pair<uint64_t, int>> prompt_lens;  // engine id, prompt tokens
  for (const std::string& text : texts) {
    std::vector<int> ids;
    if (o.chat) {
      const auto kind = engine::resolve_chat_template(bundle, o.chat_template);
      if (o.no_think && !tokenizer::has_thinking_switch(kind)) {
        fail("--no-think: the {} chat template has no thinking switch (only qwen3 does)",
             tokenizer::chat_template_name(kind));
      }
      ids = engine::encode_chat_prompt(bundle, kind, text, o.system, !o.no_think);
    } else {
      ids = engine::encode_raw_prompt(bundle, text, o.special_tokens == "parse");
    }
    const int prompt_len = static_cast<int>(ids.size());
    if (policy->evicts() && config.kv.budget.long_prompt_warned(prompt_len))
      log_warn("{}{}", config.kv.budget.long_prompt_warning(prompt_len),
               o.samples > 1 ? fmt::format(" (one prompt, {} samples)", o.samples) : std::string());
    for (int i = 0; i < o.samples; ++i) {
      engine::GenerationRequest req;
      req.prompt = ids;
      req.max_new_tokens = o.max_new_tokens;
      req.sampling = sampling;
      req.stop_ids = stop_ids;
      req.ignore_eos = o.ignore_eos;
      prompt_lens.emplace_back(eng.submit(std::move(req)), static_cast<int>(ids.size()));
    }
  }
  const int n_sequences = static_cast<int>(texts.size()) * o.samples;
  const bool stream = !o.json && n_sequences == 1;
  if (!o.json && !o.quiet) {
    fmt::print(stderr, "kvdice: model {} ({}), backend {}, policy {}, budget {}\n", bundle.source,
               bundle.format, backend->name(), policy::describe(eng.policy()), eng.budget().describe());
  }
  // Written to a temporary name and renamed when the run ends: a reader never sees half a log.
  std::optional<analyze::RetentionLogWriter> retention;
  if (!o.retention_log.empty()) {
    retention.emplace(o.retention_log);
    retention->begin(eng, "generate", bundle.source, bundle.model->config());
    for (const auto& [id, prompt_len] : prompt_lens) retention->note_prompt(id, prompt_len);
  }
  tokenizer::StreamDecoder decoder(*bundle.tokenizer);
  const auto start = std::chrono::steady_clock::now();
  eng.run([&](const engine::TokenEvent& ev) {
    if (!stream) return;
    const bool is_stop = std::find(stop_ids.begin(), stop_ids.end(), ev.token) != stop_ids.end();
    if (!is_stop || o.ignore_eos) fmt::print("{}", decoder.push(ev.token));
    if (ev.finished) fmt::print("{}\n", decoder.flush());
    flush_stdout();  // a full disk stops the run here, not after it
  });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (retention) retention->commit();
  auto results = eng.take_finished();
  std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  const int bytes_per_element = eng.kv_bytes_per_element();
  int64_t total_generated = 0;
  Json records = Json::array();
  for (const auto& r : results) {
    total_generated += r.stats.generated_tokens;
    std::vector<int> visible = r.tokens;
    if (r.finish == engine::FinishReason::Stop && !visible.empty()) visible.pop_back();
    const std::string text = bundle.tokenizer->decode(visible);
    if (o.json) {
      Json rec = engine::result_json(r, text, bundle.model->config(), bytes_per_element);
      rec["model"] = bundle.source;
      rec["policy"] = std::string(eng.policy().name());
      rec["policy_options"] = eng.policy().options();
      rec["budget"] = eng.budget().budget;
      rec["window"] = eng.budget().window;
      rec["seed"] = o.seed;
      records.push_back(std::move(rec));
    } else {
      if (!stream) fmt::print("=== sequence {} ===\n{}\n", r.id, text);
      fmt::print(stderr, "--- sequence {} ---\n{}", r.id,
                 engine::result_summary(r, bundle.model->config(), bytes_per_element));
    }
  }
  if (o.json) {
    // Generated text may end inside a UTF-8 character: replace invalid bytes rather than fail.
    const Json& out = records.size() == 1 ? records[0] : records;
    fmt::print("{}\n", out.dump(-1, ' ', false, Json::error_handler_t::replace));
  } else {
    fmt::print(stderr, "total: {} sequences, {} generated tokens in {:.2f} s ({:.1f} tok/s overall)\n",
               results.size(), total_generated, wall, wall > 0 ? total_generated / wall : 0.0);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text under a KV-cache budget");
  cmd->add_option("--model,-m", o->model,
                  "HF checkpoint directory, .gguf file, or a known model name (e.g. default)")
      ->required();
  cmd->add_option("--prompt,-p", o->prompts, "Prompt text (repeat for several sequences in one batch)");
  cmd->add_option("--prompt-file", o->prompt_files, "File holding one prompt (repeatable)");
  cmd->add_option("--special-tokens", o->special_tokens,
                  "Raw prompts: 'parse' turns special-token text such as <|im_start|> into its token "
                  "(transformers' default, the default here); 'text' encodes it as plain text")
      ->check(CLI::IsMember({"parse", "text"}));
  cmd->add_flag("--chat", o->chat, "Wrap each prompt as a user message in the model's chat template");
  cmd->add_option("--system", o->system, "System message (with --chat)");
  cmd->add_flag("--no-think", o->no_think, "Qwen3: thinking off (pre-fills an empty <think></think>)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Override the chat template (qwen3, chatml, llama3, phi4, deepseek_r1, llama31, "
                  "phi4_reasoning, qwen3_thinking)");
  cmd->add_option("--policy", o->policy,
                  fmt::format("Eviction policy, optionally with options: name[:key=value,...] "
                              "(docs/policies.md). Known: {}",
                              fmt::join(policy::policy_names(), ", ")));
  add_int_option(cmd, "--budget,-T", o->budget, 0, kMaxTokens,
                 "KV budget T per layer and KV head (includes prompt and window)");
  add_int_option(cmd, "--window,-r", o->window, 1, kMaxTokens,
                 "Recency window r; rounds fire every r decode tokens");
  cmd->add_option("--long-prompt", o->long_prompt,
                  "Prompt longer than T - r: warn (reference behaviour) or error")
      ->check(CLI::IsMember({"warn", "error"}));
  add_seed_option(cmd, "--seed", o->seed, "Seed for eviction and sampling streams");
  add_temperature_option(cmd, "--temperature", o->temperature, "Sampling temperature (0 = greedy)");
  add_top_p_option(cmd, "--top-p", o->top_p, "Nucleus sampling mass, in (0, 1]");
  add_int_option(cmd, "--top-k", o->top_k, 0, kMaxTokens, "Top-k (0 = off)");
  add_int_option(cmd, "--max-new-tokens,-n", o->max_new_tokens, 1, kMaxTokens,
                 "Tokens to generate per sequence");
  add_int_option(cmd, "--samples", o->samples, 1, kMaxBatch, "Sequences per prompt (independent streams)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-sequence tokens");
  add_int_option(cmd, "--max-batch", o->max_batch, 0, kMaxBatch,
                 "Most sequences decoding at once (0 = all of them)");
  add_int_option(
      cmd, "--max-context", o->max_context, 0, kMaxTokens,
      "Longest KV reservation of one sequence in slots (0 = the model's maximum position, at least 4096)");
  add_backend_flags(cmd, o->backend);
  add_kv_pool_flags(cmd, o->pool);
  cmd->add_flag("--json", o->json, "Print one JSON record (or an array) instead of text");
  cmd->add_flag("--quiet,-q", o->quiet, "Only the generated text and the final statistics");
  cmd->add_option(
      "--retention-log", o->retention_log,
      "Write a retention log: a header, then one JSON line per eviction round with the kept absolute "
      "positions per [layer][KV head] (docs/mechanism.md)");
  cmd->callback([o, cmd] { run_generate(*o, *cmd); });
}

}  // namespace kvdice::cli
