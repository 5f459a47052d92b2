// `kvdice inspect`: a checkpoint's config, parameter count, dtypes and KV bytes per token.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"

namespace kvdice::cli {
namespace {

struct PlanOptions {
  backend::BackendOptions backend{"", 0, 0};  // empty name: no memory plan
  int budget = 2048;
  int window = 64;
  int prompt_len = 1024;
  int max_new_tokens = 32768;
  int max_batch = 128;
  kv::PoolRequest pool;
};

// What the engine allocates on the backend: weights, activations, and the KV pool with how many
// sequences of a given shape it holds.
Json memory_plan(const std::filesystem::path& path, const PlanOptions& o) {
  engine::ModelBundle bundle = engine::load_model_bundle(path);
  auto be = backend::make_backend(o.backend);
  engine::EngineConfig config;
  config.kv.policy = "random_pp";
  config.kv.budget = {o.budget, o.window};
  config.max_batch = o.max_batch;
  config.pool = o.pool;
  engine::Engine eng(*bundle.model, *be, config);
  const engine::MemoryPlan& p = eng.memory_plan();
  const int64_t budgeted = std::max<int64_t>(o.prompt_len, o.budget) + o.window;
  const int64_t full = int64_t{o.prompt_len} + o.max_new_tokens;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const backend::MemoryInfo mem = be->memory();
  return Json{{"backend", be->name()},
              {"device_total_gib", mem.total_bytes / gib},
              {"device_free_gib_after_plan", mem.free_bytes / gib},
              {"weights_gib", p.weight_bytes / gib},
              {"activations_gib", p.activation_bytes / gib},
              {"kv_pool_gib", p.kv_pool_bytes / gib},
              {"kv_pool_slots_per_head", p.kv_pool_slots},
              {"kv_bytes_per_slot", p.kv_bytes_per_slot},
              {"kv_page_slots", p.kv_page_slots},
              {"max_batch", o.max_batch},
              {"kv_pool_rule", p.kv_pool_rule},
              {"sequences_at_budget", eng.sequences_that_fit(budgeted)},
              {"budget_reservation_slots", budgeted},
              {"sequences_full_attention", eng.sequences_that_fit(full)},
              {"full_reservation_slots", full}};
}

// --check: every validation generate runs, no weights converted; an Error (exit 1) names the problem.
void run_check(const std::filesystem::path& path, bool as_json) {
  const engine::CheckReport r = engine::check_checkpoint(path);
  if (as_json) {
    const Json j{{"path", path.string()},
                 {"ok", true},
                 {"tensors_checked", r.tensors_checked},
                 {"tokenizer_vocab", r.tokenizer_vocab},
                 {"eos_ids", r.eos_ids},
                 {"chat_template", r.chat_template}};
    fmt::print("{}\n", j.dump(2, ' ', false, Json::error_handler_t::replace));
    return;
  }
  fmt::print("{}: ok\n  {:<24} {}\n  {:<24} {}\n  {:<24} {}\n  {:<24} {}\n",
             escape_for_message(path.string()), "tensors checked", r.tensors_checked, "tokenizer vocabulary",
             r.tokenizer_vocab, "stop ids", fmt::join(r.eos_ids, ", "), "chat template",
             escape_for_message(r.chat_template));
}

void run_inspect(const std::string& model_arg, bool as_json, bool check, const PlanOptions& plan_options) {
  const auto path = resolve_model_argument(model_arg);
  if (check) {
    run_check(path, as_json);
    return;
  }
  const engine::CheckpointSummary s = engine::summarize_checkpoint(path);
  const model::ModelConfig& c = s.config;
  Json dtypes = Json::object();
  for (const auto& [name, count] : s.dtype_counts) dtypes[name] = count;
  Json j{{"path", path.string()},
         {"format", s.format},
         {"architecture", c.architecture},
         {"family", model::family_name(c.family)},
         {"layers", c.n_layers},
         {"hidden", c.hidden},
         {"intermediate", c.intermediate},
         {"q_heads", c.n_heads},
         {"kv_heads", c.n_kv_heads},
         {"head_dim", c.head_dim},
         {"vocab", c.vocab},
         {"max_position", c.max_position},
         {"rope_theta", c.rope_theta},
         {"rope_scaling", c.rope_scaling.type},
         {"rms_eps", c.rms_eps},
         {"tied_embeddings", c.tie_embeddings},
         {"qk_norm", c.qk_norm},
         {"qkv_bias", c.qkv_bias},
         {"declared_dtype", dtype_name(c.dtype)},
         {"stored_dtypes", dtypes},
         {"tensors", s.tensors},
         {"parameters", s.parameters},
         {"kv_bytes_per_token_bf16", c.kv_bytes_per_token(2)},
         {"kv_bytes_per_token_fp32", c.kv_bytes_per_token(4)}};
  if (!plan_options.backend.name.empty()) j["memory_plan"] = memory_plan(path, plan_options);
  if (as_json) {
    // A path is bytes, not UTF-8: invalid sequences print as U+FFFD rather than abort the dump.
    fmt::print("{}\n", j.dump(2, ' ', false, Json::error_handler_t::replace));
    return;
  }
  fmt::print("{} ({})\n", escape_for_message(path.string()), s.format);
  for (const auto& [key, value] : j.items()) {
    if (key == "path" || key == "format" || key == "memory_plan") continue;
    fmt::print("  {:<24} {}\n", key,
               value.is_string() ? escape_for_message(value.get<std::string>())
                                 : value.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  fmt::print("  {:<24} {:.3f} B\n", "parameters (billions)", s.parameters / 1e9);
  if (j.contains("memory_plan")) {
    fmt::print("memory plan (T={} r={}, prompt {}, max batch {}):\n", plan_options.budget,
               plan_options.window, plan_options.prompt_len, plan_options.max_batch);
    for (const auto& [key, value] : j["memory_plan"].items())
      fmt::print("  {:<28} {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto plan = std::make_shared<PlanOptions>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "Show a checkpoint's config, parameters, dtypes and KV bytes per token");
  cmd->add_option("--model,-m", *model, "HF checkpoint directory, .gguf file, or a known model name")
      ->required();
  cmd->add_flag("--json", *as_json, "Print JSON");
  cmd->add_option("--backend", plan->backend.name,
                  "Also load the model on this backend (cpu, cuda, auto) and print its memory plan")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  add_int_option(cmd, "--budget,-T", plan->budget, 0, kMaxTokens,
                 "Memory plan: budget T per layer and KV head");
  add_int_option(cmd, "--window,-r", plan->window, 1, kMaxTokens, "Memory plan: window r");
  add_int_option(cmd, "--prompt-len", plan->prompt_len, 1, kMaxTokens,
                 "Memory plan: prompt tokens per sequence");
  add_int_option(cmd, "--max-new-tokens,-n", plan->max_new_tokens, 1, kMaxTokens,
                 "Memory plan: new tokens under full attention");
  add_int_option(cmd, "--max-batch", plan->max_batch, 1, 4096, "Memory plan: rows of the decode batch");
  add_kv_pool_flags(cmd, plan->pool);
  auto check = std::make_shared<bool>(false);
  cmd->add_flag("--check", *check,
                "Run every validation generate runs (config, tensor names, shapes and types, tokenizer, "
                "stop ids) without converting weights; exit 1 naming the first problem");
  cmd->callback([model, as_json, check, plan] { run_inspect(*model, *as_json, *check, *plan); });
}

}  // namespace kvdice::cli
