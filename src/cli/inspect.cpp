// `kvdice inspect`: a checkpoint's config, parameter count, dtypes and KV bytes per token.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "engine/model_bundle.h"

namespace kvdice::cli {
namespace {

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

void run_inspect(const std::string& model_arg, bool as_json, bool check) {
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
  if (as_json) {
    // A path is bytes, not UTF-8: invalid sequences print as U+FFFD rather than abort the dump.
    fmt::print("{}\n", j.dump(2, ' ', false, Json::error_handler_t::replace));
    return;
  }
  fmt::print("{} ({})\n", escape_for_message(path.string()), s.format);
  for (const auto& [key, value] : j.items()) {
    if (key == "path" || key == "format") continue;
    fmt::print("  {:<24} {}\n", key,
               value.is_string() ? escape_for_message(value.get<std::string>())
                                 : value.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  fmt::print("  {:<24} {:.3f} B\n", "parameters (billions)", s.parameters / 1e9);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("inspect", "Show a checkpoint's config, parameters, dtypes and KV bytes per token");
  cmd->add_option("--model,-m", *model, "HF checkpoint directory, .gguf file, or a known model name")
      ->required();
  cmd->add_flag("--json", *as_json, "Print JSON");
  auto check = std::make_shared<bool>(false);
  cmd->add_flag("--check", *check,
                "Run every validation generate runs (config, tensor names, shapes and types, tokenizer, "
                "stop ids) without converting weights; exit 1 naming the first problem");
  cmd->callback([model, as_json, check] { run_inspect(*model, *as_json, *check); });
}

}  // namespace kvdice::cli
