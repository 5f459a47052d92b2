#include "cli/model_options.h"

#include <cstdlib>

#include <fmt/format.h>

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

void add_kv_pool_flags(CLI::App* cmd, kv::PoolRequest& pool) {
  // Zero means "not given" to the sizing rule, so the ranges exclude it.
  cmd->add_option("--kv-slots", pool.kv_slots,
                  "KV pool: slots (per layer and KV head) running sequences may reserve together; overrides "
                  "the memory rule")
      ->transform(integer_in(1, uint64_t{1} << 40));
  cmd->add_option("--kv-memory-gib", pool.kv_memory_gib, "KV pool size in GiB")->check(number_in(1e-6, 1 << 20));
  cmd->add_option("--gpu-memory-utilization", pool.gpu_memory_utilization,
                  fmt::format("CUDA: fraction of the device's memory this process may hold; the KV pool takes "
                              "what weights, activations and step buffers leave of it, in (0, 1] (default {})",
                              kv::kDefaultGpuMemoryUtilization))
      ->check(number_in(1e-6, 1.0));
}

}  // namespace kvdice::cli
