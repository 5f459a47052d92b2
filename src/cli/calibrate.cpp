// `kvdice calibrate`: TriAttention's calibration statistics of a model over a text (docs/policies.md).
#include <fmt/core.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "calibrate/triattention_calibration.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "engine/model_bundle.h"
#include "model/model_store.h"

namespace kvdice::cli {
namespace {
namespace fs = std::filesystem;

struct CalibrateOptions {
  std::string model, text, out;
  int64_t tokens = 50000;
  int segment = 4096;
  int threads = 0;
};

// --out may replace a file only when it holds TriAttention statistics (a calibration run again); any
// other file there is the user's and is refused. Checked before any work, as is the place itself (the
// AtomicFile opened in run_calibrate), so a wrong --out costs no calibration.
void check_output_replaceable(const std::string& out) {
  std::error_code error;
  const fs::file_status status = fs::status(out, error);
  if (fs::is_directory(status)) fail("--out {} is a directory; name the statistics file to write", out);
  if (!fs::is_regular_file(status)) return;  // absent, or a device or FIFO written in place
  try {
    (void)policy::read_triattention_stats(out);
  } catch (const Error& e) {
    fail("--out {} exists and does not hold TriAttention statistics ({}); not overwriting it", out, e.what());
  }
}

void run_calibrate(const CalibrateOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  check_output_replaceable(o.out);
  AtomicFile out(o.out);  // a temporary beside --out: an unwritable place fails now
  const std::string text = read_user_text_file(o.text, uint64_t{1} << 30);
  const auto model_path = resolve_model_argument(o.model);
  engine::ModelBundle bundle = engine::load_model_bundle(model_path);
  std::vector<int> tokens = bundle.tokenizer->encode(text, /*parse_special=*/false);
  if (static_cast<int64_t>(tokens.size()) < o.tokens)
    fail(
        "--text {} holds {} tokens, fewer than --tokens {} (TriAttention calibrates on at least 50000 by "
        "default); give a longer text or a smaller --tokens",
        o.text, tokens.size(), o.tokens);
  tokens.resize(static_cast<size_t>(o.tokens));
  auto backend = backend::make_cpu_backend(o.threads);
  calibrate::CalibrationOptions options;
  options.segment = o.segment;
  options.chunk = 1;  // prefill rows per step: the largest divisor of the segment up to 256
  for (int c = std::min(256, o.segment); c >= 1; --c)
    if (o.segment % c == 0) {
      options.chunk = c;
      break;
    }
  policy::TriAttentionStats stats =
      calibrate::collect_triattention_stats(*bundle.model, *backend, tokens, options);
  stats.metadata["model"] = bundle.source;
  stats.metadata["architecture"] = bundle.model->config().architecture;
  stats.metadata["rope_theta"] = fmt::format("{}", bundle.model->config().rope_theta);
  stats.metadata["text"] = o.text;
  stats.metadata["text_sha256"] = model::sha256_file(o.text);
  const double validity = stats.validity();
  stats.metadata["validity"] = fmt::format("{:.6f}", validity);
  out.commit(policy::triattention_stats_bytes(stats));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  fmt::print("calibrated {} on {} tokens of {} (sha256 {}), segments of {} tokens, in {:.1f} s\n",
             bundle.source, stats.metadata["tokens"], o.text, stats.metadata["text_sha256"], o.segment,
             seconds);
  fmt::print("validity (mean over layers of the per-head max over bands of |E q| / E|q|): {:.4f}\n",
             validity);
  fmt::print("wrote {}\n", o.out);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Collect TriAttention's per-(layer, query head, RoPE band) query statistics of a model (CPU)");
  cmd->add_option("-m,--model", o->model, "Model: HF checkpoint directory, .gguf file or known name")
      ->required();
  cmd->add_option("--text", o->text, "Calibration text file (plain text, tokenized without special tokens)")
      ->required();
  cmd->add_option("--out", o->out, "Statistics file to write (safetensors; see docs/policies.md)")
      ->required();
  add_int_option(cmd, "--tokens", o->tokens, 1, kMaxTokens, "Tokens of the text to use (the first N)")
      ->capture_default_str();
  add_int_option(cmd, "--segment", o->segment, 1, 1 << 20,
                 "Tokens per independent segment (each starts at position 0)")
      ->capture_default_str();
  add_int_option(cmd, "--threads", o->threads, 0, kMaxThreads, "CPU threads (0 = all cores)");
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace kvdice::cli
