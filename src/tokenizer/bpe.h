// The BPE model: a pre-token (in byte-level characters) becomes ids by applying merges in rank
// order, lowest rank first and leftmost first among equals, exactly as HF tokenizers' BPE does.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvdice::tokenizer {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // `vocab`: id -> token (empty strings for ids without a model token, e.g. added-only ids).
  // `where` names the source for errors: a merge whose parts or result are not in the vocab, a
  // vocab that lacks one of the 256 byte-level symbols.
  Bpe(const std::vector<std::string>& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      bool ignore_merges, std::string_view where);
  Bpe(Bpe&& other) noexcept;

  // Appends the ids of one pre-token given in byte-level characters. Thread-safe.
  void encode_word(std::string_view word, std::vector<int>& out) const;
  std::optional<int> id_of(std::string_view token) const;

 private:
  struct Merge {
    int rank;
    int result;
  };
  static std::uint64_t pair_key(int left, int right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  void merge_symbols(std::string_view word, std::vector<int>& out) const;

  TokenIndex index_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  bool ignore_merges_;
  // Pre-tokens repeat a lot in natural text; remembering their ids saves most of the merge work.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> cache_;
};

}  // namespace kvdice::tokenizer
