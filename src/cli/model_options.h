// Shared CLI plumbing: the --model flag (a path, or a known model name that is pulled into the
// cache at $KVDICE_HOME, default ~/.cache/kvdice) and the --backend / --threads flags.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "kv/pool_sizing.h"

namespace kvdice::cli {

std::filesystem::path kvdice_home();
// A path that exists is used as is; otherwise a known model name is pulled.
std::filesystem::path resolve_model_argument(const std::string& name_or_path);

// --backend cpu|cuda|auto and --threads on a subcommand that runs a model.
void add_backend_flags(CLI::App* cmd, backend::BackendOptions& options);

// --kv-slots, --kv-memory-gib and --gpu-memory-utilization on a subcommand that builds a KV pool
// (kv/pool_sizing.h: at most one of them; none = the default rule).
void add_kv_pool_flags(CLI::App* cmd, kv::PoolRequest& pool);

}  // namespace kvdice::cli
