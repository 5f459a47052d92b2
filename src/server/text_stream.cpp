#include "server/text_stream.h"

#include <algorithm>
#include <utility>

namespace kvdice::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.substr(0, n) == text.substr(text.size() - n)) return n;
  }
  return 0;
}

}  // namespace

std::string StopMatcher::push(const std::string& piece) {
  if (stopped_) return {};
  held_ += piece;
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  size_t hold = 0;
  for (const auto& s : stops_) hold = std::max(hold, partial_suffix(held_, s));
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

SplitText ThinkSplitter::push(const std::string& piece) {
  held_ += piece;
  return drain(false);
}

SplitText ThinkSplitter::flush() { return drain(true); }

SplitText ThinkSplitter::drain(bool final) {
  SplitText out;
  while (true) {
    if (state_ == State::Start) {
      // Leading whitespace before <think> is allowed; anything else means there is no section.
      const size_t lead = held_.find_first_not_of(" \n");
      if (lead == std::string::npos) {
        if (final)
          state_ = State::Content;
        else
          return out;
        continue;
      }
      std::string_view rest = std::string_view(held_).substr(lead);
      if (rest.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, lead + kOpen.size());
        state_ = State::Thinking;
        continue;
      }
      if (!final && rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return out;
      state_ = State::Content;
      continue;
    }
    if (state_ == State::Thinking) {
      const size_t close = held_.find(kClose);
      if (close != std::string::npos) {
        out.reasoning += held_.substr(0, close);
        held_.erase(0, close + kClose.size());
        // The template puts "\n\n" between </think> and the answer; it belongs to neither.
        strip_newlines_ = true;
        state_ = State::Content;
        continue;
      }
      const size_t hold = final ? 0 : partial_suffix(held_, kClose);
      out.reasoning += held_.substr(0, held_.size() - hold);
      held_.erase(0, held_.size() - hold);
      return out;
    }
    if (strip_newlines_) {
      const size_t lead = held_.find_first_not_of('\n');
      held_.erase(0, lead == std::string::npos ? held_.size() : lead);
      if (held_.empty()) return out;
      strip_newlines_ = false;
    }
    out.content += std::exchange(held_, {});
    return out;
  }
}

}  // namespace kvdice::server
