// A GGUF file seen through kvdice's format-neutral interfaces: its tensors under HF names in PyTorch
// shapes (dequantised to fp32, llama q/k rows un-permuted), and the ModelConfig, TokenizerParts and
// GenerationConfig that its metadata describes.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "formats/gguf.h"
#include "formats/tensor_source.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::model {

// The checkpoint readers (src/formats) these declarations speak of.
using formats::GgufFile;
using formats::GgmlType;
using formats::GgufTensor;
using formats::StoredBlocks;
using formats::TensorInfo;
using formats::TensorSource;

// GGUF architectures kvdice runs ("qwen2, qwen3, llama, phi3"), for error messages.
std::string supported_gguf_architectures();

// HF name of a GGUF tensor name ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight")
// for the given general.architecture; nullopt for tensors without an HF counterpart (rope_freqs).
std::optional<std::string> gguf_to_hf_name(std::string_view gguf_name, std::string_view architecture);

class GgufSource : public TensorSource {
 public:
  explicit GgufSource(const std::filesystem::path& path);
  explicit GgufSource(std::shared_ptr<const GgufFile> file);

  std::string describe() const override;
  std::vector<TensorInfo> list() const override;
  std::optional<TensorInfo> find(const std::string& name) const override;
  Tensor load_f32(const std::string& name) const override;
  void check_loadable(const std::string& name) const override;
  std::optional<StoredBlocks> stored_blocks(const std::string& name) const override;
  std::shared_ptr<const void> storage() const override { return file_; }

  const GgufFile& file() const { return *file_; }

 private:
  std::shared_ptr<const GgufFile> file_;
  std::string architecture_;
  std::vector<std::pair<std::string, const GgufTensor*>> tensors_;  // HF name, GGUF tensor; file order
  std::unordered_map<std::string, size_t> index_;
  int n_heads_ = 0;  // for undoing the llama q/k row permutation
  int n_kv_heads_ = 0;
};

// Throws Error naming the file and key for missing or ill-typed metadata, an unsupported architecture
// (listing the supported ones) or a feature kvdice cannot run (sliding window, linear/yarn RoPE).
ModelConfig config_from_gguf(const GgufFile& file);

// Byte-level BPE vocabulary, merges, added tokens, BOS and chat template from tokenizer.ggml.*;
// tokenizer.ggml.model must be "gpt2".
tokenizer::TokenizerParts tokenizer_parts_from_gguf(const GgufFile& file);

// Stop ids: tokenizer.ggml.eos/eot/eom ids plus the end-of-turn control tokens llama.cpp treats as
// end of generation (<|im_end|>, <|endoftext|>, <|eot_id|>, ...) when the vocabulary has them.
GenerationConfig generation_config_from_gguf(const GgufFile& file);

}  // namespace kvdice::model
