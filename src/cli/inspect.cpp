// `kvdice inspect`: a checkpoint's config, parameter count, dtypes and KV bytes per token.
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/model_bundle.h"

namespace kvdice::cli {
namespace {

void run_inspect(const std::string& model_arg, bool as_json) {
  const auto path = resolve_model_argument(model_arg);
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
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{} ({})\n", j["path"].get<std::string>(), s.format);
  for (const auto& [key, value] : j.items()) {
    if (key == "path" || key == "format") continue;
    fmt::print("  {:<24} {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
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
  cmd->callback([model, as_json] { run_inspect(*model, *as_json); });
}

}  // namespace kvdice::cli
