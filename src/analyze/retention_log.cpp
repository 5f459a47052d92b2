#include "analyze/retention_log.h"

#include <fstream>
#include <optional>

#include "core/error.h"
#include "core/json.h"
#include "model/config.h"

namespace kvdice::analyze {

std::string retention_header_line(const RetentionLogHeader& h) {
  return Json{{"format", kRetentionLogFormat},
              {"version", kRetentionLogVersion},
              {"source", h.source},
              {"model", h.model},
              {"policy", h.policy},
              {"policy_options", h.policy_options},
              {"budget", h.budget},
              {"window", h.window},
              {"layers", h.layers},
              {"kv_heads", h.kv_heads}}
             .dump() +
         "\n";
}

std::string retention_round_line(uint64_t sequence, int prompt_len, const kv::RoundRecord& record) {
  return Json{{"sequence", sequence},
              {"prompt_len", prompt_len},
              {"round", record.round},
              {"at_token", record.at_token},
              {"kept_positions", record.kept_positions}}
             .dump() +
         "\n";
}

RetentionLogWriter::RetentionLogWriter(const std::filesystem::path& path) : file_(path) {}

void RetentionLogWriter::begin(engine::Engine& engine, const std::string& source, const std::string& model,
                               const model::ModelConfig& config) {
  RetentionLogHeader h;
  h.source = source;
  h.model = model;
  h.policy = std::string(engine.policy().name());
  h.policy_options = engine.policy().options();
  h.budget = engine.budget().budget;
  h.window = engine.budget().window;
  h.layers = config.n_layers;
  h.kv_heads = config.n_kv_heads;
  file_.write(retention_header_line(h));
  prompt_len_.clear();
  engine.set_round_observer([this](uint64_t id, const kv::RoundRecord& record) {
    const auto it = prompt_len_.find(id);
    if (it == prompt_len_.end()) fail("retention log: round of sequence {} whose prompt was never noted", id);
    file_.write(retention_round_line(id, it->second, record));
  });
}

void RetentionLogWriter::note_prompt(uint64_t sequence, int prompt_len) {
  prompt_len_[sequence] = prompt_len;
}

void RetentionLogWriter::commit() { file_.commit(); }

namespace {

template <typename T>
T field(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) fail("{}: missing \"{}\"", where, key);
  try {
    return j.at(key).get<T>();
  } catch (const std::exception&) {
    fail("{}: \"{}\" has the wrong type", where, key);
  }
}

RetentionLogHeader parse_header(const Json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("format"))
    fail("{}: not a retention log header (no \"format\"; logs from before version 1 have none)", where);
  const auto format = field<std::string>(j, "format", where);
  if (format != kRetentionLogFormat)
    fail("{}: format \"{}\", expected \"{}\"", where, format, kRetentionLogFormat);
  const int version = field<int>(j, "version", where);
  if (version != kRetentionLogVersion)
    fail("{}: retention log version {}; this kvdice reads version {}", where, version, kRetentionLogVersion);
  RetentionLogHeader h;
  h.source = field<std::string>(j, "source", where);
  h.model = field<std::string>(j, "model", where);
  h.policy = field<std::string>(j, "policy", where);
  h.policy_options = field<std::string>(j, "policy_options", where);
  h.budget = field<int>(j, "budget", where);
  h.window = field<int>(j, "window", where);
  h.layers = field<int>(j, "layers", where);
  h.kv_heads = field<int>(j, "kv_heads", where);
  if (h.layers < 1 || h.kv_heads < 1) fail("{}: layers and kv_heads must be >= 1", where);
  return h;
}

RetentionRound parse_round(const Json& j, const RetentionLogHeader& h, const std::string& where) {
  RetentionRound r;
  r.sequence = field<uint64_t>(j, "sequence", where);
  r.prompt_len = field<int>(j, "prompt_len", where);
  r.round = field<uint32_t>(j, "round", where);
  r.at_token = field<int64_t>(j, "at_token", where);
  if (r.prompt_len < 0 || r.at_token < r.prompt_len)
    fail("{}: prompt_len {} and at_token {} do not fit (0 <= prompt_len <= at_token)", where, r.prompt_len,
         r.at_token);
  r.kept = field<std::vector<std::vector<std::vector<int32_t>>>>(j, "kept_positions", where);
  if (static_cast<int>(r.kept.size()) != h.layers)
    fail("{}: {} layers of kept positions, the header says {}", where, r.kept.size(), h.layers);
  for (size_t l = 0; l < r.kept.size(); ++l) {
    if (static_cast<int>(r.kept[l].size()) != h.kv_heads)
      fail("{}: layer {} has {} KV heads, the header says {}", where, l, r.kept[l].size(), h.kv_heads);
    for (size_t k = 0; k < r.kept[l].size(); ++k) {
      const auto& p = r.kept[l][k];
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] < 0 || p[i] >= r.at_token)
          fail("{}: layer {} head {}: position {} outside [0, at_token {})", where, l, k, p[i], r.at_token);
        if (i > 0 && p[i] <= p[i - 1])
          fail("{}: layer {} head {}: positions not strictly ascending ({} after {})", where, l, k, p[i],
               p[i - 1]);
      }
    }
  }
  return r;
}

}  // namespace

void read_retention_log(const std::filesystem::path& path,
                        const std::function<void(const RetentionLogHeader&)>& on_header,
                        const std::function<void(const RetentionRound&)>& on_round) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open retention log {}", path.string());
  std::optional<RetentionLogHeader> header;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = fmt::format("{} line {}", path.string(), n);
    if (in.eof()) fail("{}: truncated (the last line has no newline; the log was cut off)", where);
    if (line.empty()) fail("{}: empty line", where);
    Json j;
    try {
      j = Json::parse(line);
    } catch (const std::exception&) {
      fail("{}: not valid JSON (truncated or corrupt)", where);
    }
    if (j.is_object() && j.contains("format")) {
      header = parse_header(j, where);
      on_header(*header);
    } else {
      if (!header) parse_header(j, where);  // fails: a log starts with its header
      on_round(parse_round(j, *header, where));
    }
  }
  if (in.bad()) fail("{}: read error", path.string());
  if (!header) fail("{}: empty (no header line)", path.string());
}

std::vector<RetentionSection> read_retention_log(const std::filesystem::path& path) {
  std::vector<RetentionSection> sections;
  read_retention_log(
      path,
      [&](const RetentionLogHeader& h) {
        sections.push_back({h, {}});
      },
      [&](const RetentionRound& r) { sections.back().rounds.push_back(r); });
  return sections;
}

}  // namespace kvdice::analyze
