#include "cli/model_options.h"

#include <cstdlib>

#include "cli/flags.h"
#include "model/model_store.h"

namespace kvdice::cli {

std::filesystem::path kvdice_home() {
  if (const char* home = std::getenv("KVDICE_HOME"); home != nullptr && *home != '\0') return home;
  const char* user_home = std::getenv("HOME");
  return std::filesystem::path(user_home != nullptr ? user_home : ".") / ".cache" / "kvdice";
}

std::filesystem::path resolve_model_argument(const std::string& name_or_path) {
  return model::resolve_model_path(name_or_path, kvdice_home());
}

void add_backend_flags(CLI::App* cmd, backend::BackendOptions& options) {
  cmd->add_option("--backend", options.name, "Where to run: cpu, cuda, or auto (CUDA when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  add_int_option(cmd, "--threads", options.threads, 0, kMaxThreads, "CPU threads (0 = all)");
  cmd->add_option("--cpu-math", options.cpu_math,
                  "CPU linear layers of a GGUF model: fast (weights kept in their GGUF blocks, int8 "
                  "activations) or exact (weights converted to fp32 at load: the fp32 reference)")
      ->check(CLI::IsMember({"fast", "exact"}));
}

}  // namespace kvdice::cli
