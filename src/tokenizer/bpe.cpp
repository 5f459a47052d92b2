#include "tokenizer/bpe.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace kvdice::tokenizer {
namespace {

constexpr std::size_t kCacheMaxEntries = 1 << 16;
constexpr std::size_t kCacheMaxWordBytes = 256;

}  // namespace

Bpe::Bpe(const std::vector<std::string>& vocab,
         const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
         std::string_view where)
    : ignore_merges_(ignore_merges) {
  index_.reserve(vocab.size());
  for (std::size_t id = 0; id < vocab.size(); ++id)
    if (!vocab[id].empty()) index_.emplace(vocab[id], static_cast<int>(id));
  for (int b = 0; b < 256; ++b)
    if (!index_.contains(byte_symbol(static_cast<unsigned char>(b))))
      fail("{}: vocab lacks the byte-level symbol '{}' for byte 0x{:02X}; a byte-level BPE vocab has all 256",
           where, byte_symbol(static_cast<unsigned char>(b)), b);
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = index_.find(left), r = index_.find(right);
    if (l == index_.end() || r == index_.end())
      fail("{}: merge {} ('{} {}') refers to token '{}' which is not in the vocab", where, rank, left, right,
           l == index_.end() ? left : right);
    auto joined = index_.find(left + right);
    if (joined == index_.end())
      fail("{}: merge {} ('{} {}') produces '{}' which is not in the vocab", where, rank, left, right,
           left + right);
    // A repeated pair keeps its first (lowest) rank, as HF does.
    merges_.try_emplace(pair_key(l->second, r->second), Merge{static_cast<int>(rank), joined->second});
  }
}

Bpe::Bpe(Bpe&& other) noexcept
    : index_(std::move(other.index_)),
      merges_(std::move(other.merges_)),
      ignore_merges_(other.ignore_merges_),
      cache_(std::move(other.cache_)) {}

std::optional<int> Bpe::id_of(std::string_view token) const {
  auto it = index_.find(token);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void Bpe::encode_word(std::string_view word, std::vector<int>& out) const {
  if (ignore_merges_) {
    if (auto it = index_.find(word); it != index_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::size_t first = out.size();
  merge_symbols(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(word),
                   std::vector<int>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void Bpe::merge_symbols(std::string_view word, std::vector<int>& out) const {
  struct Symbol {
    int id;
    int prev;
    int next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (std::size_t i = 0; i < word.size();) {
    std::size_t len = utf8_sequence_length(static_cast<unsigned char>(word[i]));
    auto it = index_.find(word.substr(i, len));
    // Every character here is a byte-level symbol and the constructor made sure all 256 are known.
    KVDICE_CHECK(it != index_.end(), "byte-level symbol missing from the vocab");
    int n = static_cast<int>(symbols.size());
    symbols.push_back({it->second, n - 1, -1});
    if (n > 0) symbols[n - 1].next = n;
    i += len;
  }

  struct Candidate {
    int rank;
    int pos;  // index of the left symbol
    int result;
    int right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int left) {
    if (left < 0) return;
    int right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.result, symbols[right].id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    // Stale when either side has merged since the candidate was queued (removed symbols get id -1).
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.rank != c.rank || right.id != c.right_id) continue;
    left.id = c.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace kvdice::tokenizer
