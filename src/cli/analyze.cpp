// `kvdice analyze retention`: statistics over retention logs (docs/mechanism.md). Parses flags; the
// work lives in src/analyze.
#include <fmt/core.h>

#include <optional>

#include "analyze/retention_log.h"
#include "analyze/retention_stats.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/file_io.h"

namespace kvdice::cli {
namespace {

struct RetentionFlags {
  std::vector<std::string> logs;
  std::string heads;
  std::string format = "md";
  std::string out;
  std::string age_bins;
  int position_bins = 16;
};

void run_analyze_retention(const RetentionFlags& f, const CLI::App* cmd) {
  analyze::RetentionStatsOptions options;
  if (given(cmd, "--heads")) options.sites = analyze::parse_head_sites(f.heads);
  if (given(cmd, "--age-bins")) options.age_edges = analyze::parse_age_edges(f.age_bins);
  options.position_bins = f.position_bins;
  std::vector<analyze::RetentionStats> stats;
  for (const std::string& log : f.logs)
    for (auto& s : analyze::analyze_retention_log(log, options)) stats.push_back(std::move(s));
  const std::string text =
      f.format == "csv" ? analyze::retention_csv(stats) : analyze::retention_markdown(stats, options);
  if (f.out.empty()) {
    fmt::print("{}", text);
    flush_stdout();
  } else {
    write_file_atomically(f.out, text);
  }
}

}  // namespace

void add_analyze_command(CLI::App& app) {
  CLI::App* analyze = app.add_subcommand("analyze", "Statistics over logs that runs wrote");
  analyze->require_subcommand(1);
  auto r = std::make_shared<RetentionFlags>();
  CLI::App* cmd = analyze->add_subcommand(
      "retention", "Per round, layer and age: what the KV heads keep together versus alone (retention logs)");
  cmd->add_option("logs", r->logs, "Retention logs (--retention-log of generate, eval run, probe passcode)")
      ->required();
  cmd->add_option("--heads", r->heads,
                  "Only these (layer, KV head) sites, as L:H,L:H,...; their union is taken across layers");
  cmd->add_option("--format", r->format, "md (markdown tables) or csv")->check(CLI::IsMember({"md", "csv"}));
  cmd->add_option("--out,-o", r->out, "Output file (default stdout)");
  cmd->add_option(
      "--age-bins", r->age_bins,
      "Lower edges of the age bins, strictly increasing (default 128,256,512,1024,2048,4096,8192; "
      "the last bin is open)");
  add_int_option(cmd, "--position-bins", r->position_bins, 2, 1 << 20,
                 "Equal-width bins over the generated positions for the coverage entropy");
  cmd->callback([r, cmd] { run_analyze_retention(*r, cmd); });
}

}  // namespace kvdice::cli
