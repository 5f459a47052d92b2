#include "eval/data_convert.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "eval/hashing.h"

namespace kvdice::eval {
namespace {

const char* type_name(const Json& j) {
  if (j.is_string()) return "a string";
  if (j.is_number_integer()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_boolean()) return "a boolean";
  if (j.is_null()) return "null";
  if (j.is_array()) return "an array";
  return "an object";
}

enum class Kind { String, Integer };

// The field's value, or Error naming the file, line and field.
const Json& require(const Json& object, const std::string& where, const char* field, Kind kind) {
  if (!object.contains(field)) fail("{}: field \"{}\" is missing", where, field);
  const Json& value = object[field];
  const bool ok = kind == Kind::String ? value.is_string() : value.is_number_integer();
  if (!ok)
    fail("{}: field \"{}\" must be {} (got {})", where, field, kind == Kind::String ? "a string" : "an integer",
         type_name(value));
  return value;
}

Json convert_math500(const Json& in, const std::string& where) {
  for (const char* field : {"problem", "solution", "answer", "subject", "unique_id"})
    require(in, where, field, Kind::String);
  require(in, where, "level", Kind::Integer);
  return Json{{"id", in["unique_id"]},   {"problem", in["problem"]}, {"answer", in["answer"]},
              {"subject", in["subject"]}, {"level", in["level"]}};
}

// Import lines of the prompt: a completion that restates only the function still needs them.
std::string import_lines(const std::string& prompt) {
  std::string out, line;
  std::istringstream lines(prompt);
  while (std::getline(lines, line))
    if (line.starts_with("import ") || line.starts_with("from ")) out += line + "\n";
  return out;
}

Json convert_humaneval(const Json& in, const std::string& where) {
  for (const char* field : {"task_id", "prompt", "canonical_solution", "test", "entry_point"})
    require(in, where, field, Kind::String);
  const std::string prompt = in["prompt"];
  // One test with no input: the program (imports, the completion's code, the upstream check)
  // passes when check(entry_point) raises nothing.
  return Json{{"id", in["task_id"]},
              {"prompt", prompt},
              {"entry_point", in["entry_point"]},
              {"preamble", import_lines(prompt)},
              {"check", in["test"]},
              {"tests", Json::array({Json{{"input", ""}, {"output", ""}}})}};
}

}  // namespace

SourceFormat source_format_from_name(const std::string& name) {
  if (name == "math500") return SourceFormat::Math500;
  if (name == "humaneval") return SourceFormat::HumanEval;
  fail("--format must be math500 or humaneval (got '{}')", name);
}

ConvertSummary convert_dataset(const ConvertOptions& o) {
  std::ifstream in(o.input, std::ios::binary);
  if (!in) fail("cannot read {}", o.input.string());
  ConvertSummary summary;
  summary.input_sha256 = sha256_of_file(o.input);
  if (o.expected_sha256 && *o.expected_sha256 != summary.input_sha256)
    fail("{} has sha256 {}, not the pinned {}: another version of the file", o.input.string(),
         summary.input_sha256, *o.expected_sha256);

  std::string converted, line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", o.input.string(), number);
    Json object;
    try {
      object = Json::parse(line);
    } catch (const Json::exception& e) {
      fail("{}: not valid JSON: {}", where, e.what());
    }
    if (!object.is_object()) fail("{}: each line must be a JSON object", where);
    const Json out =
        o.format == SourceFormat::Math500 ? convert_math500(object, where) : convert_humaneval(object, where);
    converted += out.dump() + "\n";
    ++summary.problems;
  }
  if (summary.problems == 0) fail("{} holds no problems", o.input.string());

  write_file_atomically(o.output, converted);  // a failed conversion leaves no half file
  summary.manifest = o.output.string() + ".manifest.json";
  const Json manifest = {{"source_format", o.format == SourceFormat::Math500 ? "math500" : "humaneval"},
                         {"source", o.format == SourceFormat::Math500
                                        ? "Hugging Face HuggingFaceH4/MATH-500 test.jsonl"
                                        : "openai/human-eval HumanEval.jsonl"},
                         {"source_path", o.input.string()},
                         {"source_sha256", summary.input_sha256},
                         {"problems", summary.problems},
                         {"dataset_sha256", sha256_hex(converted)}};
  write_file_atomically(summary.manifest, manifest.dump(2) + "\n");
  return summary;
}

}  // namespace kvdice::eval
