#include "engine/model_bundle.h"

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/weights.h"

namespace kvdice::engine {
namespace fs = std::filesystem;

// GGUF loading lives in gguf_bundle.cpp.
ModelBundle load_gguf_file(const fs::path& path, const model::LoadOptions& options);
CheckpointSummary summarize_gguf(const fs::path& path);
CheckReport check_gguf(const fs::path& path);
CheckReport make_check_report(const model::ModelConfig& config, const tokenizer::Tokenizer& tok,
                              const model::GenerationConfig& generation);

namespace {

bool is_gguf_file(const fs::path& path) { return fs::is_regular_file(path) && path.extension() == ".gguf"; }

void check_exists(const fs::path& path) {
  if (!fs::exists(path))
    fail("model path {} does not exist (give an HF checkpoint directory or a .gguf file)", path.string());
  if (!fs::is_directory(path) && !is_gguf_file(path)) {
    fail("{} is neither an HF checkpoint directory nor a .gguf file", path.string());
  }
}

ModelBundle load_hf_dir(const fs::path& dir, const model::LoadOptions& options) {
  ModelBundle bundle;
  bundle.source = dir.string();
  bundle.format = "safetensors";
  model::ModelConfig config = model::ModelConfig::from_hf_dir(dir);
  bundle.generation = model::GenerationConfig::from_hf_dir(dir);
  bundle.weight_dtype = std::string(dtype_name(config.dtype));
  auto source = formats::open_safetensors_dir(dir);
  model::ModelWeights weights = model::load_weights(config, *source, options);
  bundle.model = std::make_unique<model::Model>(std::move(config), std::move(weights));
  bundle.tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_hf_dir(dir));
  return bundle;
}

}  // namespace

void check_bundle_consistency(const std::string& where, const model::ModelConfig& config,
                              const tokenizer::Tokenizer& tokenizer,
                              const model::GenerationConfig& generation) {
  if (tokenizer.vocab_size() > config.vocab) {
    fail("{}: tokenizer has {} tokens but the model's vocabulary is {}", where, tokenizer.vocab_size(),
         config.vocab);
  }
  for (int id : generation.eos_ids) {
    if (id < 0 || id >= config.vocab)
      fail("{}: stop token id {} is outside the model's vocabulary of {}", where, id, config.vocab);
  }
}

ModelBundle load_model_bundle(const fs::path& path, const model::LoadOptions& options) {
  check_exists(path);
  ModelBundle bundle = is_gguf_file(path) ? load_gguf_file(path, options) : load_hf_dir(path, options);
  check_bundle_consistency(path.string(), bundle.model->config(), *bundle.tokenizer, bundle.generation);
  return bundle;
}

CheckReport check_checkpoint(const fs::path& path) {
  check_exists(path);
  if (is_gguf_file(path)) return check_gguf(path);
  const model::ModelConfig config = model::ModelConfig::from_hf_dir(path);
  const model::GenerationConfig generation = model::GenerationConfig::from_hf_dir(path);
  const auto source = formats::open_safetensors_dir(path);
  model::check_weights(config, *source);
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_hf_dir(path);
  check_bundle_consistency(path.string(), config, tok, generation);
  return make_check_report(config, tok, generation);
}

CheckReport make_check_report(const model::ModelConfig& config, const tokenizer::Tokenizer& tok,
                              const model::GenerationConfig& generation) {
  CheckReport report;
  report.tensors_checked = static_cast<int64_t>(model::required_tensors(config).size());
  report.tokenizer_vocab = tok.vocab_size();
  report.eos_ids = generation.eos_ids;
  try {
    report.chat_template = std::string(
        tokenizer::chat_template_name(tokenizer::detect_chat_template(tok.chat_template_source())));
  } catch (const Error& e) {
    report.chat_template = fmt::format("none ({})", e.what());
  }
  return report;
}

CheckpointSummary summarize_tensors(const formats::TensorSource& source) {
  CheckpointSummary summary;
  for (const formats::TensorInfo& info : source.list()) {
    int64_t n = 1;
    for (int64_t d : info.shape) n *= d;
    summary.parameters += n;
    summary.tensors++;
    summary.dtype_counts[info.dtype]++;
  }
  return summary;
}

CheckpointSummary summarize_checkpoint(const fs::path& path) {
  check_exists(path);
  if (is_gguf_file(path)) return summarize_gguf(path);
  CheckpointSummary summary = summarize_tensors(*formats::open_safetensors_dir(path));
  summary.format = "safetensors";
  summary.config = model::ModelConfig::from_hf_dir(path);
  return summary;
}

tokenizer::ChatTemplate resolve_chat_template(const ModelBundle& bundle, const std::string& override_name) {
  if (!override_name.empty()) return tokenizer::chat_template_from_name(override_name);
  return tokenizer::detect_chat_template(bundle.tokenizer->chat_template_source());
}

std::vector<int> encode_chat_prompt(const ModelBundle& bundle, tokenizer::ChatTemplate kind,
                                    const std::string& user_text, const std::string& system_text,
                                    bool enable_thinking) {
  std::vector<tokenizer::ChatMessage> messages;
  if (!system_text.empty()) messages.push_back({"system", system_text});
  messages.push_back({"user", user_text});
  const std::string rendered = tokenizer::render_chat(kind, messages, {true, enable_thinking});
  // Templates that start with BOS text already carry it; encode_prompt() does not add a second one.
  return bundle.tokenizer->encode_prompt(rendered, /*parse_special=*/true);
}

std::vector<int> encode_raw_prompt(const ModelBundle& bundle, const std::string& text, bool parse_special) {
  return bundle.tokenizer->encode_prompt(text, parse_special);
}

}  // namespace kvdice::engine
