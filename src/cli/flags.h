// Checked numeric flags: the one way every subcommand declares an integer or real-valued option.
// CLI11 alone reads "010" as 8, "0x10" as 16, "-1" into an unsigned seed as 2^64 - 1 and "nan" or
// "1e39" into a float; these validators run on the text first and accept only a plain decimal number
// inside the flag's stated range, so an out-of-range or malformed value is refused, never narrowed.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace kvdice::cli {

// A decimal integer (optional leading '-', digits only) in [min, max].
CLI::Validator integer_in(int64_t min, uint64_t max);
// A finite decimal number in [min, max].
CLI::Validator number_in(double min, double max);

// Options bound to a variable with the matching validator.
CLI::Option* add_int_option(CLI::App* cmd, const std::string& name, int& value, int min, int max,
                            const std::string& help);
CLI::Option* add_seed_option(CLI::App* cmd, const std::string& name, uint64_t& value,
                             const std::string& help);
CLI::Option* add_int_option(CLI::App* cmd, const std::string& name, int64_t& value, int64_t min, int64_t max,
                            const std::string& help);
CLI::Option* add_number_option(CLI::App* cmd, const std::string& name, float& value, double min, double max,
                               const std::string& help);
CLI::Option* add_number_option(CLI::App* cmd, const std::string& name, double& value, double min, double max,
                               const std::string& help);
// Sampling values, checked by engine::temperature_problem / top_p_problem, the same rule that every
// other entry point (task files, the engine's submit) applies.
CLI::Option* add_temperature_option(CLI::App* cmd, const std::string& name, float& value,
                                    const std::string& help);
CLI::Option* add_top_p_option(CLI::App* cmd, const std::string& name, float& value, const std::string& help);
// True when the user gave `flag` (so a task's or protocol's default is overridden, never by a sentinel).
inline bool given(const CLI::App* cmd, const std::string& flag) { return cmd->count(flag) > 0; }

// The --threads bound: 0 means every core; more than this is a typo, not a machine (the backend's).
inline constexpr int kMaxThreads = backend::kMaxCpuThreads;
// Token counts (budgets, windows, generation lengths): far above any context length in use, far
// below where a sum of two of them could overflow int.
inline constexpr int kMaxTokens = 1 << 24;
// Rows of one decode batch (--max-batch, --requests, bench --batches): the engine's largest batch.
inline constexpr int kMaxBatch = 4096;

}  // namespace kvdice::cli
