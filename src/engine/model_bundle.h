// ModelBundle: everything needed to chat with a checkpoint — config, weights, tokenizer, chat
// template and stop ids — loaded from an HF directory or a GGUF file.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/model.h"
#include "formats/tensor_source.h"
#include "model/weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::engine {

struct ModelBundle {
  std::string source;  // path it was loaded from
  std::string format;  // "safetensors" or "gguf"
  model::GenerationConfig generation;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::string weight_dtype;  // as stored, e.g. "bfloat16" or "Q4_K_M mix"
};

// Loads an HF checkpoint directory or a .gguf file; Error naming the path otherwise. `options` says
// which stored types (GGUF blocks, bf16 / fp16 matrices) stay as stored (pass the backend's
// block_weight_types()).
ModelBundle load_model_bundle(const std::filesystem::path& path, const model::LoadOptions& options = {});
// What `inspect` shows, read without converting any weights.
struct CheckpointSummary {
  std::string format;
  model::ModelConfig config;
  int64_t parameters = 0;
  int64_t tensors = 0;
  std::map<std::string, int64_t> dtype_counts;  // stored dtype -> number of tensors
};
CheckpointSummary summarize_checkpoint(const std::filesystem::path& path);

// What `inspect --check` reports after running every validation load_model_bundle runs (config, every
// required tensor's presence, shape and stored type, tokenizer, stop ids against the vocabulary)
// without converting any weights. An Error names the first problem.
struct CheckReport {
  int64_t tensors_checked = 0;
  int tokenizer_vocab = 0;
  std::vector<int> eos_ids;
  std::string chat_template;  // detected template name, or why none was detected (--chat would fail)
};
CheckReport check_checkpoint(const std::filesystem::path& path);

// The checks that tie the parts together: tokenizer and stop ids fit the model's vocabulary.
void check_bundle_consistency(const std::string& where, const model::ModelConfig& config,
                              const tokenizer::Tokenizer& tokenizer,
                              const model::GenerationConfig& generation);
CheckpointSummary summarize_tensors(const formats::TensorSource& source);

// The chat template to use: `override_name` when given, else detected from the tokenizer's Jinja.
tokenizer::ChatTemplate resolve_chat_template(const ModelBundle& bundle, const std::string& override_name);

// Renders one user message through the chat template and tokenizes it (BOS added if configured).
std::vector<int> encode_chat_prompt(const ModelBundle& bundle, tokenizer::ChatTemplate kind,
                                    const std::string& user_text, const std::string& system_text,
                                    bool enable_thinking);
// Tokenizes raw text (BOS added if configured).
// `parse_special`: special-token text such as "<|im_start|>" becomes its token (transformers' default),
// or is encoded as plain text.
std::vector<int> encode_raw_prompt(const ModelBundle& bundle, const std::string& text,
                                   bool parse_special = false);

}  // namespace kvdice::engine
