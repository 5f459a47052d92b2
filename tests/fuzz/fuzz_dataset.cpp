// libFuzzer target: an evaluation dataset (JSONL) through eval::parse_dataset, the reader `eval run`,
// `eval grade` and `eval check` use. kvdice::Error is the only acceptable failure; any other exception,
// sanitizer report or crash is a bug. An accepted dataset must hold problems that each have a question.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "eval/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const bool need_answer : {false, true}) {
    try {
      const kvdice::eval::Dataset d = kvdice::eval::parse_dataset(bytes, "fuzz/dataset.jsonl", need_answer);
      if (d.problems.empty()) __builtin_trap();
      for (const auto& p : d.problems)
        if (p.question.empty() || (need_answer && p.answer.empty())) __builtin_trap();
    } catch (const kvdice::Error&) {
    }
  }
  return 0;
}
