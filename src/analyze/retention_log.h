// Retention logs: which absolute positions each (layer, KV head) of a sequence still holds after every
// eviction round. JSON Lines, versioned (docs/mechanism.md):
//   a header line  {"format":"kvdice-retention","version":1,"source":...,"model":...,"policy":...,
//                   "policy_options":...,"budget":T,"window":r,"layers":L,"kv_heads":H}
//   then one line per round  {"sequence":id,"prompt_len":pl,"round":k,"at_token":n,
//                             "kept_positions":[[[p,...] per KV head] per layer]}
// A log holds one or more sections, each a header followed by its rounds (`probe passcode` writes one
// per evicting policy). `generate`, `eval run` and `probe passcode` write it; `analyze retention` reads it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "engine/engine.h"
#include "kv/eviction_round.h"

namespace kvdice::analyze {

inline constexpr const char* kRetentionLogFormat = "kvdice-retention";
inline constexpr int kRetentionLogVersion = 1;

struct RetentionLogHeader {
  std::string source;  // the subcommand that wrote it: generate, eval run, probe passcode
  std::string model;
  std::string policy;
  std::string policy_options;
  int budget = 0;
  int window = 0;
  int layers = 0;
  int kv_heads = 0;
};

// One round of one sequence. kept[layer][head] is sorted ascending; positions < prompt_len are prompt.
struct RetentionRound {
  uint64_t sequence = 0;
  int prompt_len = 0;
  uint32_t round = 0;
  int64_t at_token = 0;  // tokens appended when the round fired = the sequence's current length
  std::vector<std::vector<std::vector<int32_t>>> kept;
};

struct RetentionSection {
  RetentionLogHeader header;
  std::vector<RetentionRound> rounds;
};

// Writes a log under a temporary name and renames it at commit(): a reader never sees half a log.
class RetentionLogWriter {
 public:
  explicit RetentionLogWriter(const std::filesystem::path& path);

  // Starts a section for this engine's policy and budget and observes its rounds; call before run().
  // The engine must outlive the section (until the next begin() or commit()).
  void begin(engine::Engine& engine, const std::string& source, const std::string& model,
             const model::ModelConfig& config);
  // The prompt length of a submitted sequence (needed to tell prompt from generated positions).
  void note_prompt(uint64_t sequence, int prompt_len);
  void commit();

 private:
  AtomicFile file_;
  std::map<uint64_t, int> prompt_len_;
};

std::string retention_header_line(const RetentionLogHeader& header);
std::string retention_round_line(uint64_t sequence, int prompt_len, const kv::RoundRecord& record);

// Reads and validates a whole log: header format and version, every round's shape against its
// header, positions sorted, unique and below at_token. Any problem fails naming the file and line.
std::vector<RetentionSection> read_retention_log(const std::filesystem::path& path);
// The same checks, streaming: `on_header` at each section's header, `on_round` for each of its rounds.
void read_retention_log(const std::filesystem::path& path,
                        const std::function<void(const RetentionLogHeader&)>& on_header,
                        const std::function<void(const RetentionRound&)>& on_round);

}  // namespace kvdice::analyze
