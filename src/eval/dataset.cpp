#include "eval/dataset.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "eval/hashing.h"

namespace kvdice::eval {
namespace {

std::string answer_text(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump();  // numbers, lists: their JSON spelling
}

}  // namespace

Dataset load_dataset(const std::filesystem::path& path, bool need_answer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read dataset {}", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  Dataset dataset;
  dataset.path = std::filesystem::absolute(path);
  dataset.sha256 = sha256_hex(bytes);
  std::istringstream lines(bytes);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_no);
    Json object;
    try {
      object = Json::parse(line);
    } catch (const Json::exception& e) {
      fail("{}: not valid JSON: {}", where, e.what());
    }
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
