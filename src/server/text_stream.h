// Text post-processing of one generated sequence, applied piece by piece as tokens stream in:
// stop strings (OpenAI `stop`) and the split of a <think>...</think> section into
// `reasoning_content` (as vLLM's reasoning parsers do). Both hold back a tail that may be the start
// of a marker, so a marker split across tokens is still found and never leaks into the output.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvdice::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Returns the text safe to emit; after a stop string is seen, everything from it on is dropped.
  std::string push(const std::string& piece);
  std::string flush();  // the held-back tail at the end of the sequence
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

struct SplitText {
  std::string reasoning;
  std::string content;
};

class ThinkSplitter {
 public:
  // `opened`: the prompt already ends inside a think section (R1, Qwen3-Thinking-2507 templates
  // pre-fill "<think>\n"). Otherwise a section is recognised only at the very start of the output.
  explicit ThinkSplitter(bool opened) : state_(opened ? State::Thinking : State::Start) {}
  SplitText push(const std::string& piece);
  SplitText flush();

 private:
  enum class State { Start, Thinking, Content };
  SplitText drain(bool final);
  State state_;
  std::string held_;
  bool strip_newlines_ = false;
};

}  // namespace kvdice::server
