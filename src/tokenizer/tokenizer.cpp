#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_loader.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/split_regex.h"

namespace kvdice::tokenizer {
namespace {

std::vector<std::string> split_patterns_for(const TokenizerParts& parts) {
  if (!parts.split_patterns.empty()) return parts.split_patterns;
  switch (parts.pre) {
    case PreTokenizer::Qwen2:
      return {kQwen2Pattern};
    case PreTokenizer::Llama3:
      return {kLlama3Pattern};
    case PreTokenizer::Gpt2:
      return {kGpt2Pattern};
  }
  KVDICE_CHECK(false, "unknown PreTokenizer {}", static_cast<int>(parts.pre));
  return {};
}

}  // namespace

struct Tokenizer::Impl {
  explicit Impl(const TokenizerParts& parts)
      : bpe(parts.vocab, parts.merges, parts.ignore_merges.value_or(parts.pre == PreTokenizer::Llama3),
            parts.source),
        raw_added(parts.added, false),
        normalized_added(parts.added, true),
        nfc(parts.nfc),
        add_prefix_space(parts.add_prefix_space),
        bos_id(parts.bos_id),
        add_bos(parts.add_bos),
        chat_template(parts.chat_template) {
    for (const auto& pattern : split_patterns_for(parts)) splits.emplace_back(pattern, parts.source);
    token_strings = parts.vocab;
    for (const auto& t : parts.added) {
      auto id = static_cast<std::size_t>(t.id);
      if (t.id < 0) fail("{}: added token '{}' has negative id {}", parts.source, t.content, t.id);
      if (id >= token_strings.size()) token_strings.resize(id + 1);
      token_strings[id] = t.content;
    }
    special.assign(token_strings.size(), false);
    for (const auto& t : parts.added) special[static_cast<std::size_t>(t.id)] = t.special;
    bytes.reserve(token_strings.size());
    for (std::size_t id = 0; id < token_strings.size(); ++id) {
      bytes.push_back(symbols_to_bytes(token_strings[id]));
      if (!token_strings[id].empty()) ids.try_emplace(token_strings[id], static_cast<int>(id));
    }
    if (bos_id && (*bos_id < 0 || static_cast<std::size_t>(*bos_id) >= token_strings.size()))
      fail("{}: BOS id {} is outside the vocab (size {})", parts.source, *bos_id, token_strings.size());
    if (add_bos && !bos_id) fail("{}: add_bos is set but there is no BOS token", parts.source);
  }

  void encode_text(std::string_view text, std::vector<int>& out) const {
    if (text.empty()) return;
    std::string prefixed;
    if (add_prefix_space && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed += ' ';
      prefixed += text;
      text = prefixed;
    }
    std::vector<std::string_view> pieces{text}, next;
    for (const auto& regex : splits) {
      next.clear();
      for (auto piece : pieces) regex.split(piece, next);
      pieces.swap(next);
    }
    for (auto piece : pieces) bpe.encode_word(bytes_to_symbols(piece), out);
  }

  Bpe bpe;
  std::vector<SplitRegex> splits;
  AddedTokenMatcher raw_added;         // matched in the raw text
  AddedTokenMatcher normalized_added;  // matched after normalisation
  bool nfc;
  bool add_prefix_space;
  std::optional<int> bos_id;
  bool add_bos;
  std::string chat_template;
  std::vector<std::string> token_strings;  // id -> vocab token or added-token content
  std::vector<std::string> bytes;          // id -> the bytes it decodes to
  std::vector<bool> special;
  TokenIndex ids;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_hf_dir(const std::filesystem::path& dir) {
  return from_parts(read_hf_tokenizer(dir));
}

Tokenizer Tokenizer::from_parts(TokenizerParts parts) { return Tokenizer(std::make_unique<Impl>(parts)); }

std::vector<int> Tokenizer::encode(std::string_view text, bool parse_special) const {
  require_valid_utf8(text);
  std::vector<int> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<Segment> raw, normalized;
  impl_->raw_added.split(text, parse_special, raw);
  for (const auto& segment : raw) {
    if (segment.id >= 0) {
      out.push_back(segment.id);
      continue;
    }
    std::string norm = impl_->nfc ? tokenizer::nfc(segment.text) : std::string(segment.text);
    normalized.clear();
    impl_->normalized_added.split(norm, parse_special, normalized);
    for (const auto& piece : normalized) {
      if (piece.id >= 0) {
        out.push_back(piece.id);
      } else {
        impl_->encode_text(piece.text, out);
      }
    }
  }
  return out;
}

std::vector<int> Tokenizer::encode_prompt(std::string_view text, bool parse_special) const {
  std::vector<int> ids = encode(text, parse_special);
  if (impl_->add_bos && (ids.empty() || ids.front() != *impl_->bos_id))
    ids.insert(ids.begin(), *impl_->bos_id);
  return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string out;
  for (int id : ids) out += token_bytes(id);
  return out;
}

std::string Tokenizer::token_bytes(int id) const {
  if (id < 0 || id >= vocab_size())
    fail("tokenizer: token id {} is outside the vocab (size {})", id, vocab_size());
  return impl_->bytes[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(int id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<std::size_t>(id)];
}

int Tokenizer::vocab_size() const { return static_cast<int>(impl_->token_strings.size()); }

std::optional<int> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::optional<int> Tokenizer::bos_id() const { return impl_->bos_id; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
const std::string& Tokenizer::chat_template_source() const { return impl_->chat_template; }

std::string StreamDecoder::push(int id) {
  pending_ += tokenizer_.token_bytes(id);
  std::size_t complete = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace kvdice::tokenizer
