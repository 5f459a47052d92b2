// Byte-level BPE tokenizer (GPT-2 style, as used by Qwen2/Qwen3, Llama-3, Phi-4): added/special
// tokens split out first, optional NFC normalisation, a pre-tokenizer split regex (PCRE2),
// byte-to-unicode mapping, merges by rank. Built from tokenizer.json or from parts (GGUF vocab).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvdice::tokenizer {

// Which split regex the pre-tokenizer uses.
enum class PreTokenizer { Qwen2, Llama3, Gpt2 };

struct AddedToken {
  int id = 0;
  std::string content;
  bool special = true;       // not matched when encode(parse_special = false); non-special ones still are
  bool lstrip = false;       // swallows the whitespace on its left
  bool rstrip = false;       // swallows the whitespace on its right
  bool normalized = false;   // matched in normalised text instead of raw text
  bool single_word = false;  // matched only when not inside a word
};

// Everything needed to build a tokenizer, independent of the file format it came from.
struct TokenizerParts {
  std::vector<std::string> vocab;  // id -> token string in byte-level alphabet ("Ġthe")
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::vector<AddedToken> added;                            // matched verbatim before BPE
  PreTokenizer pre = PreTokenizer::Qwen2;
  // tokenizer.json: Split regexes (behaviour Isolated) applied in order; overrides `pre` when non-empty.
  std::vector<std::string> split_patterns;
  bool add_prefix_space = false;      // ByteLevel: prepend " " to each text segment not starting with one
  std::optional<bool> ignore_merges;  // a pre-token found whole in the vocab is emitted as is; default:
                                      // true for Llama3 (as its tokenizer.json says), false otherwise
  bool nfc = false;                   // normalizer: NFC
  std::optional<int> bos_id;
  bool add_bos = false;                    // prepend BOS when encoding a whole prompt
  std::string chat_template;               // Jinja source, if any (used only to detect the template kind)
  std::string source = "tokenizer parts";  // names the origin (a file) in error messages
};

class Tokenizer {
 public:
  // Reads tokenizer.json (+ tokenizer_config.json for the chat template and BOS) from `dir`.
  static Tokenizer from_hf_dir(const std::filesystem::path& dir);
  static Tokenizer from_parts(TokenizerParts parts);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Special/added tokens in `text` are recognised when `parse_special` is true. Never adds BOS.
  // Throws Error when `text` is not valid UTF-8.
  std::vector<int> encode(std::string_view text, bool parse_special = true) const;
  // encode() plus BOS in front when add_bos() and the text does not already start with it (a rendered
  // Llama-3 chat already does), so a prompt never carries two.
  std::vector<int> encode_prompt(std::string_view text, bool parse_special = true) const;
  // Concatenated bytes of the tokens; may end in a partial UTF-8 sequence.
  std::string decode(std::span<const int> ids) const;
  std::string token_bytes(int id) const;  // raw bytes one token stands for
  bool is_special(int id) const;          // an added token marked special (<|im_end|>, <|eot_id|>)

  int vocab_size() const;
  std::optional<int> token_id(std::string_view token) const;  // exact vocab or added token
  std::optional<int> bos_id() const;
  bool add_bos() const;
  const std::string& chat_template_source() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a token stream into valid UTF-8 text pieces: bytes of an unfinished multi-byte character
// are held back until the character completes (or flushed raw at the end).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int id);
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace kvdice::tokenizer
