// `kvdice calibrate`: TriAttention's calibration statistics of a model over a text (docs/policies.md), or
// of `bench --random-weights`' model over random token ids, so that a benchmark without a checkpoint
// can time TriAttention.
#include <fmt/core.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "bench/bench_model.h"
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
  bool random_weights = false;
  std::string config;  // the shape of --random-weights
  uint64_t seed = 0;   // of the random weights and token ids, as bench's --seed
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
  // The model and its tokens: a checkpoint over the text, or bench --random-weights' model (the same
  // weights for the same --config and --seed) over uniform token ids.
  engine::ModelBundle bundle;
  bench::BenchModel random;
  std::vector<int> tokens;
  std::string text_source, text_sha256;
  if (o.random_weights) {
    bench::BenchOptions shape;
    shape.random_weights = true;
    shape.config_path = o.config;
    shape.seed = o.seed;
    shape.backend.name = "cpu";  // calibration runs on the CPU backend (below)
    random = bench::load_bench_model(shape);
    tokens = bench::random_prompt(random.model().config().vocab, static_cast<int>(o.tokens), o.seed, 0);
    text_source = fmt::format("random token ids (seed {})", o.seed);
  } else {
    const std::string text = read_user_text_file(o.text, uint64_t{1} << 30);
    bundle = engine::load_model_bundle(resolve_model_argument(o.model));
    tokens = bundle.tokenizer->encode(text, /*parse_special=*/false);
    if (static_cast<int64_t>(tokens.size()) < o.tokens)
      fail(
          "--text {} holds {} tokens, fewer than --tokens {} (TriAttention calibrates on at least 50000 by "
          "default); give a longer text or a smaller --tokens",
          o.text, tokens.size(), o.tokens);
    tokens.resize(static_cast<size_t>(o.tokens));
    text_source = o.text;
    text_sha256 = model::sha256_file(o.text);
  }
  const model::Model& model = o.random_weights ? random.model() : *bundle.model;
  const std::string model_source = o.random_weights ? random.source : bundle.source;
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
      calibrate::collect_triattention_stats(model, *backend, tokens, options);
  stats.metadata["model"] = model_source;
  stats.metadata["architecture"] = model.config().architecture;
  stats.metadata["rope_theta"] = fmt::format("{}", model.config().rope_theta);
  stats.metadata["text"] = text_source;
  if (!text_sha256.empty()) stats.metadata["text_sha256"] = text_sha256;
  const double validity = stats.validity();
  stats.metadata["validity"] = fmt::format("{:.6f}", validity);
  out.commit(policy::triattention_stats_bytes(stats));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  fmt::print("calibrated {} on {} tokens of {}{}, segments of {} tokens, in {:.1f} s\n", model_source,
             stats.metadata["tokens"], text_source, text_sha256.empty() ? "" : " (sha256 " + text_sha256 + ")",
             o.segment, seconds);
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
  cmd->add_option("-m,--model", o->model, "Model: HF checkpoint directory, .gguf file or known name");
  cmd->add_option("--text", o->text, "Calibration text file (plain text, tokenized without special tokens)");
  cmd->add_flag("--random-weights", o->random_weights,
                "The model bench --random-weights runs (same --config and --seed), over random token ids");
  cmd->add_option("--config", o->config, "HF config.json of the shape (configs/shapes/*.json)");
  add_seed_option(cmd, "--seed", o->seed, "Seed of the random weights and token ids (bench's --seed)");
  cmd->add_option("--out", o->out, "Statistics file to write (safetensors; see docs/policies.md)")
      ->required();
  add_int_option(cmd, "--tokens", o->tokens, 1, kMaxTokens, "Tokens of the text to use (the first N)")
      ->capture_default_str();
  add_int_option(cmd, "--segment", o->segment, 1, 1 << 20,
                 "Tokens per independent segment (each starts at position 0)")
      ->capture_default_str();
  add_int_option(cmd, "--threads", o->threads, 0, kMaxThreads, "CPU threads (0 = all cores)");
  cmd->callback([o, cmd] {
    // A checkpoint and a text, or random weights of a shape (no tokenizer, so no text).
    if (o->random_weights) {
      if (!o->model.empty()) fail("give --model or --random-weights --config FILE, not both");
      if (o->config.empty()) fail("--random-weights needs --config FILE (e.g. configs/shapes/qwen3-4b.json)");
      if (!o->text.empty()) fail("--random-weights calibrates on random token ids (it has no tokenizer); drop --text");
    } else {
      if (o->model.empty()) fail("kvdice calibrate needs --model M --text FILE, or --random-weights --config FILE");
      if (o->text.empty()) fail("--text FILE is required with --model");
      if (!o->config.empty()) fail("--config is the shape for --random-weights; add --random-weights");
      if (cmd->count("--seed") > 0) fail("--seed is the seed of --random-weights; add --random-weights");
    }
    run_calibrate(*o);
  });
}

}  // namespace kvdice::cli
