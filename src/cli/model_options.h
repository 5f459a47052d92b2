// Shared CLI plumbing: the --model flag (a path, or a known model name that is pulled into the
// cache at $KVDICE_HOME, default ~/.cache/kvdice) and the --threads flag.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

namespace kvdice::cli {

std::filesystem::path kvdice_home();
// A path that exists is used as is; otherwise a known model name is pulled.
std::filesystem::path resolve_model_argument(const std::string& name_or_path);

}  // namespace kvdice::cli
