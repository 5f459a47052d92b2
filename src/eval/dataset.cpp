#include "eval/dataset.h"

#include "core/error.h"
#include "core/file_io.h"
#include "eval/hashing.h"

namespace kvdice::eval {
namespace {

std::string answer_text(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump();  // numbers, lists: their JSON spelling
}

}  // namespace

Dataset load_dataset(const std::filesystem::path& path, bool need_answer) {
  // A regular file of bounded size: /dev/zero or a FIFO is refused by name instead of read for ever.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("cannot read dataset {}: no such file", path.string());
  const std::string bytes = read_regular_file(path, kMaxDatasetBytes);
  return parse_dataset(bytes, path, need_answer);
}

Dataset parse_dataset(std::string_view bytes, const std::filesystem::path& path, bool need_answer) {
  Dataset dataset;
  dataset.path = std::filesystem::absolute(path);
  dataset.sha256 = sha256_hex(bytes);
  size_t start = 0;
  int line_no = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string_view::npos) end = bytes.size();
    const std::string_view line = bytes.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_no);
    // Duplicate keys are refused (nlohmann alone keeps the last one, silently).
    Json object = parse_json_text(line, where);
    if (!object.is_object()) fail("{}: each line must be a JSON object", where);
    Problem p;
    p.index = static_cast<int>(dataset.problems.size());
    for (const char* key : {"question", "problem", "prompt"}) {
      if (object.contains(key) && object[key].is_string()) {
        p.question = object[key].get<std::string>();
        break;
      }
    }
    if (p.question.empty())
      fail("{}: no question (a non-empty string under question, problem or prompt)", where);
    if (object.contains("answer") && !object["answer"].is_null()) p.answer = answer_text(object["answer"]);
    if (need_answer && p.answer.empty()) fail("{}: no answer (the gold answer under \"answer\")", where);
    p.id = object.contains("id") ? answer_text(object["id"]) : std::to_string(p.index);
    p.raw = std::move(object);
    dataset.problems.push_back(std::move(p));
  }
  if (dataset.problems.empty()) fail("dataset {} holds no problems", path.string());
  return dataset;
}

}  // namespace kvdice::eval
