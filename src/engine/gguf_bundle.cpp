// The GGUF half of model_bundle: config, weights (dequantised to fp32, or kept in their blocks where
// the options say so), tokenizer and stop ids all come from the one file.
#include "engine/model_bundle.h"
#include "model/gguf_source.h"
#include "model/weights.h"

namespace kvdice::engine {
namespace fs = std::filesystem;

ModelBundle load_gguf_file(const fs::path& path, const model::LoadOptions& options) {
  auto file = std::make_shared<const formats::GgufFile>(formats::GgufFile::open(path));
  ModelBundle bundle;
  bundle.source = path.string();
  bundle.format = "gguf";
  model::ModelConfig config = model::config_from_gguf(*file);
  bundle.generation = model::generation_config_from_gguf(*file);
  model::GgufSource source(file);
  model::ModelWeights weights = model::load_weights(config, source, options);
  bundle.weight_dtype = options.keep_block_types.empty()
                            ? "gguf (dequantised to fp32 at load)"
                            : "gguf (blocks kept as stored where the backend reads them)";
  bundle.model = std::make_unique<model::Model>(std::move(config), std::move(weights));
  bundle.tokenizer = std::make_unique<tokenizer::Tokenizer>(
      tokenizer::Tokenizer::from_parts(model::tokenizer_parts_from_gguf(*file)));
  return bundle;
}

CheckReport make_check_report(const model::ModelConfig& config, const tokenizer::Tokenizer& tok,
                              const model::GenerationConfig& generation);

CheckReport check_gguf(const fs::path& path) {
  auto file = std::make_shared<const formats::GgufFile>(formats::GgufFile::open(path));
  const model::ModelConfig config = model::config_from_gguf(*file);
  const model::GenerationConfig generation = model::generation_config_from_gguf(*file);
  model::check_weights(config, model::GgufSource(file));
  const auto tok = tokenizer::Tokenizer::from_parts(model::tokenizer_parts_from_gguf(*file));
  check_bundle_consistency(path.string(), config, tok, generation);
  return make_check_report(config, tok, generation);
}

CheckpointSummary summarize_gguf(const fs::path& path) {
  auto file = std::make_shared<const formats::GgufFile>(formats::GgufFile::open(path));
  CheckpointSummary summary = summarize_tensors(model::GgufSource(file));
  summary.format = "gguf";
  summary.config = model::config_from_gguf(*file);
  return summary;
}

}  // namespace kvdice::engine
