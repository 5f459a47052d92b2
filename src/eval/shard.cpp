#include "eval/shard.h"

#include <charconv>

#include "core/error.h"

namespace kvdice::eval {
namespace {

bool parse_int(std::string_view text, int& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string ShardSpec::describe() const { return std::to_string(index) + "/" + std::to_string(count); }

ShardSpec parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  ShardSpec spec;
  if (slash == std::string::npos || !parse_int(std::string_view(text).substr(0, slash), spec.index) ||
      !parse_int(std::string_view(text).substr(slash + 1), spec.count))
    fail("--shard must be i/N with whole numbers, e.g. 0/4 (got '{}')", text);
  if (spec.count < 1) fail("--shard {}: N must be >= 1", text);
  if (spec.index < 0 || spec.index >= spec.count)
    fail("--shard {}: i must lie in [0, N), shards are numbered 0..{}", text, spec.count - 1);
  return spec;
}

}  // namespace kvdice::eval
