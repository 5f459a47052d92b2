// `kvdice data convert`: upstream benchmark files to kvdice datasets. The work lives in
// src/eval/data_convert; this file parses flags.
#include <fmt/core.h>

#include "cli/commands.h"
#include "eval/data_convert.h"

namespace kvdice::cli {
namespace {

struct ConvertFlags {
  std::string format, input, output, sha256;
};

void run_convert(const ConvertFlags& f) {
  eval::ConvertOptions o;
  o.format = eval::source_format_from_name(f.format);
  o.input = f.input;
  o.output = f.output;
  if (!f.sha256.empty()) o.expected_sha256 = f.sha256;
  const auto summary = eval::convert_dataset(o);
  fmt::print("{}: {} problems from {} (sha256 {}); manifest {}\n", f.output, summary.problems, f.input,
             summary.input_sha256, summary.manifest.string());
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Benchmark datasets: convert upstream files to kvdice's JSONL");
  data->require_subcommand(1);
  auto f = std::make_shared<ConvertFlags>();
  CLI::App* convert = data->add_subcommand("convert", "Convert an upstream file (math500, humaneval)");
  convert->add_option("--format", f->format, "math500 (HF MATH-500 JSONL) or humaneval (HumanEval.jsonl)")
      ->required();
  convert->add_option("--in", f->input, "Upstream file")->required();
  convert->add_option("--out,-o", f->output, "kvdice dataset (JSONL); <out>.manifest.json beside it")->required();
  convert->add_option("--sha256", f->sha256, "Refuse the input unless it has this sha256");
  convert->callback([f] { run_convert(*f); });
}

}  // namespace kvdice::cli
