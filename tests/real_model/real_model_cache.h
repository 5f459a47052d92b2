// Where the real-model tests keep the pulled default model: the same cache the CLI uses ($KVDICE_HOME,
// else ~/.cache/kvdice), so a developer's `kvdice pull default` and the tests share one download.
#pragma once

#include <cstdlib>
#include <filesystem>

#include "model/model_store.h"

namespace kvdice::testing {

inline std::filesystem::path real_model_home() {
  if (const char* home = std::getenv("KVDICE_HOME"); home != nullptr && *home != '\0') return home;
  const char* user_home = std::getenv("HOME");
  return std::filesystem::path(user_home != nullptr ? user_home : ".") / ".cache" / "kvdice";
}

// Pulls through the pinned path (a no-op once verified) and returns the GGUF file.
inline std::filesystem::path default_model_path() { return model::pull_model("default", real_model_home()); }

}  // namespace kvdice::testing
