// Each subcommand lives in its own file and registers itself on the root CLI11 app. Files here
// parse arguments and call the library; no logic of their own.
#pragma once

#include <CLI/CLI.hpp>

namespace kvdice::cli {

void add_generate_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_pull_command(CLI::App& app);
void add_probe_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_stats_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_analyze_command(CLI::App& app);

}  // namespace kvdice::cli
