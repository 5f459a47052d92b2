#include "eval/integrity.h"

#include <map>

#include "core/error.h"
#include "eval/hashing.h"

namespace kvdice::eval {
namespace {

constexpr size_t kShownPerKind = 5;

struct Problems {
  std::map<std::string, std::vector<std::string>> by_kind;
  void add(const std::string& kind, std::string message) { by_kind[kind].push_back(std::move(message)); }
  bool empty() const { return by_kind.empty(); }
  std::string describe() const {
    std::string out;
    for (const auto& [kind, items] : by_kind) {
      out += fmt::format("\n  {} ({}):", kind, items.size());
      for (size_t i = 0; i < items.size() && i < kShownPerKind; ++i) out += "\n    " + items[i];
      if (items.size() > kShownPerKind)
        out += fmt::format("\n    ... and {} more", items.size() - kShownPerKind);
    }
    return out;
  }
};

}  // namespace

CheckResult check_cell(ResultsStore& store, const CellInfo& cell, const CheckOptions& options) {
  Problems issues;
  const Json& m = cell.manifest;
  if (config_hash(m) != cell.config_hash)
    issues.add("manifest", fmt::format("the stored manifest hashes to {}, not the recorded {} (edited?)",
                                       config_hash(m), cell.config_hash));
  const int problems = m.value("problems", -1);
  const int runs = m.value("runs", -1);
  if (problems != cell.problems || runs != cell.runs)
    issues.add("manifest", fmt::format("cell row says {} problems x {} runs, manifest {} x {}", cell.problems,
                                       cell.runs, problems, runs));
  int max_length = 0;
  try {
    max_length = m.at("sampling").at("max_length").get<int>();
  } catch (const Json::exception&) {
    issues.add("manifest", "no sampling.max_length");
  }

  CheckResult result;
  result.expected = cell.problems * cell.runs;
  std::vector<std::vector<bool>> seen(std::max(cell.problems, 0), std::vector<bool>(std::max(cell.runs, 0)));
  for (const Record& r : store.records(cell.name)) {
    ++result.records;
    const std::string at = fmt::format("problem {} run {}", r.problem, r.run);
    if (r.config_hash != cell.config_hash) {
      issues.add("mixed configurations",
                 fmt::format("{} was produced under configuration {}, the cell's is {}", at,
                             r.config_hash.substr(0, 12), cell.config_hash.substr(0, 12)));
    }
    if (r.problem < 0 || r.problem >= cell.problems || r.run < 0 || r.run >= cell.runs) {
      issues.add("out of range",
                 fmt::format("{} lies outside {} problems x {} runs", at, cell.problems, cell.runs));
      continue;
    }
    seen[r.problem][r.run] = true;
    if (r.stream_id != static_cast<uint64_t>(r.problem) * cell.runs + r.run)
      issues.add("seeds", fmt::format("{} has stream id {}, expected {}", at, r.stream_id,
                                      static_cast<uint64_t>(r.problem) * cell.runs + r.run));
    if (r.finish != "stop" && r.finish != "length")
      issues.add("finish reason", fmt::format("{} has finish reason '{}'", at, r.finish));
    Json tokens;
    try {
      tokens = Json::parse(r.tokens_json);
    } catch (const Json::exception&) {
    }
    if (!tokens.is_array() || static_cast<int>(tokens.size()) != r.generated_tokens)
      issues.add("token counts",
                 fmt::format("{} records {} generated tokens but stores {}", at, r.generated_tokens,
                             tokens.is_array() ? std::to_string(tokens.size()) : "no token list"));
    if (r.generated_tokens < 1 || (max_length > 0 && r.prompt_tokens + r.generated_tokens > max_length))
      issues.add("token counts",
                 fmt::format("{}: {} prompt + {} generated tokens, outside [1, max_length {}]", at,
                             r.prompt_tokens, r.generated_tokens, max_length));
  }
  std::vector<std::string> missing;
  for (int p = 0; p < cell.problems; ++p)
    for (int run = 0; run < cell.runs; ++run)
      if (!seen[p][run]) missing.push_back(fmt::format("problem {} run {}", p, run));
  if (!missing.empty()) {
    if (options.allow_incomplete) {
      result.warnings.push_back(fmt::format("{} of {} records missing (first: {})", missing.size(),
                                            result.expected, missing.front()));
    } else {
      for (auto& item : missing) issues.add("missing records", std::move(item));
    }
  }

  const std::string dataset_path =
      options.dataset ? options.dataset->string() : m.value("/dataset/path"_json_pointer, std::string());
  const std::string dataset_sha = m.value("/dataset/sha256"_json_pointer, std::string());
  if (!std::filesystem::exists(dataset_path)) {
    issues.add("dataset", fmt::format("{} is gone (pass --dataset to point at its copy)", dataset_path));
  } else if (const std::string now = sha256_of_file(dataset_path); now != dataset_sha) {
    issues.add("dataset", fmt::format("{} changed since the cell ran: sha256 {} then, {} now", dataset_path,
                                      dataset_sha.substr(0, 16), now.substr(0, 16)));
  }
  if (options.model_fingerprint) {
    const std::string stored = m.value("/model/fingerprint"_json_pointer, std::string());
    if (stored != *options.model_fingerprint)
      issues.add("model", fmt::format("the records come from model {} but the given model is {}",
                                      stored.substr(0, 16), options.model_fingerprint->substr(0, 16)));
  }
  if (!issues.empty())
    fail("cell '{}' in {} fails its integrity checks:{}", cell.name, store.path().string(),
         issues.describe());
  return result;
}

void check_comparable(const CellInfo& a, const CellInfo& b) {
  static const char* const kSame[] = {"/model/fingerprint",
                                      "/model/tokenizer",
                                      "/model/chat_template",
                                      "/dataset/sha256",
                                      "/task/name",
                                      "/task/grader",
                                      "/task/prompt_suffix",
                                      "/problems",
                                      "/runs",
                                      "/sampling/temperature",
                                      "/sampling/top_p",
                                      "/sampling/top_k",
                                      "/sampling/seed",
                                      "/sampling/max_length",
                                      "/sampling/max_new_tokens_cap"};
  std::vector<std::string> diff;
  for (const char* pointer : kSame) {
    const Json::json_pointer ptr(pointer);
    const Json va = a.manifest.contains(ptr) ? a.manifest.at(ptr) : Json();
    const Json vb = b.manifest.contains(ptr) ? b.manifest.at(ptr) : Json();
    if (va != vb) diff.push_back(fmt::format("{}: {} vs {}", pointer + 1, va.dump(), vb.dump()));
  }
  if (!diff.empty())
    fail(
        "cells '{}' and '{}' are not comparable (paired statistics need the same problems, model and "
        "sampling):\n  {}",
        a.name, b.name, fmt::format("{}", fmt::join(diff, "\n  ")));
}

}  // namespace kvdice::eval
