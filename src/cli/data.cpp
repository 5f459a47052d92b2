// `kvdice data convert`: upstream benchmark files to kvdice datasets. The work lives in
// src/eval/data_convert; this file parses flags.
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "eval/data_convert.h"

namespace kvdice::cli {
namespace {

struct ConvertFlags {
  std::string format, output, difficulty;
  std::vector<std::string> inputs, sha256;
  uint64_t seed = 0;
  bool no_shuffle = false;
};

void run_convert(const ConvertFlags& f) {
  eval::ConvertOptions o;
  o.format = eval::source_format_from_name(f.format);
  for (const auto& in : f.inputs) o.inputs.emplace_back(in);
  o.output = f.output;
  o.expected_sha256 = f.sha256;
  o.choice_seed = f.seed;
  o.shuffle_choices = !f.no_shuffle;
  if (!f.difficulty.empty()) o.difficulty = f.difficulty;
  const auto summary = eval::convert_dataset(o);
  for (size_t i = 0; i < f.inputs.size(); ++i)
    fmt::print("{}: sha256 {}\n", f.inputs[i], summary.input_sha256[i]);
  fmt::print("{}: {} problems; manifest {}\n", f.output, summary.problems, summary.manifest.string());
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Benchmark datasets: convert upstream files to kvdice's JSONL");
  data->require_subcommand(1);
  auto f = std::make_shared<ConvertFlags>();
  CLI::App* convert = data->add_subcommand(
      "convert", "Convert upstream files (math500, humaneval, aime, hmmt, gpqa, livecodebench)");
  convert
      ->add_option("--format", f->format,
                   "math500 | humaneval | aime | hmmt | gpqa (gpqa_diamond.csv) | livecodebench "
                   "(code_generation_lite test*.jsonl)")
      ->required();
  convert->add_option("--in", f->inputs, "Upstream file (JSONL, JSON array, or CSV for gpqa); repeat to pool")
      ->required();
  convert->add_option("--out,-o", f->output, "kvdice dataset (JSONL); <out>.manifest.json beside it")
      ->required();
  convert->add_option("--sha256", f->sha256,
                      "Refuse an input unless it has this sha256 (one per --in, in order)");
  add_seed_option(convert, "--seed", f->seed, "gpqa: seed of the choice order (default 0)");
  convert->add_flag("--no-shuffle", f->no_shuffle, "gpqa: keep the correct answer first, as (A)");
  convert->add_option("--difficulty", f->difficulty,
                      "livecodebench: keep only easy, medium or hard problems");
  convert->callback([f] { run_convert(*f); });
}

}  // namespace kvdice::cli
