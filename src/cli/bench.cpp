// kvdice bench throughput|capacity|evict|latency: the benchmark protocols of src/bench (docs/benchmarks.md).
#include <fmt/core.h>

#include <memory>

#include "bench/protocols.h"
#include "bench/report.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"

namespace kvdice::cli {
namespace {

struct BenchFlags {
  bench::BenchOptions options;
  std::string model;
  int bandwidth_mib = 1024;
};

// A protocol's defaults where the user gave no value: the paper's settings, or --quick's (each
// protocol well under a minute on an H200 with the Qwen3-4B shape).
void apply_defaults(bench::BenchOptions& o, const CLI::App& cmd) {
  auto unset = [&](const char* flag) { return cmd.count(flag) == 0; };
  const bool q = o.quick;
  auto set = [&](const char* flag, int& field, int full, int quick) {
    if (unset(flag)) field = q ? quick : full;
  };
  // On the CPU (the fp32 reference) --quick also shrinks the batch, so the fixture runs in seconds.
  const bool cpu = o.backend.name == "cpu" || (o.backend.name == "auto" && !backend::cuda_available());
  if (q && cpu) {
    if (unset("--requests")) o.requests = 16;
    if (unset("--batches")) o.batches = {1, 16};
  }
  if (o.protocol == "throughput") {
    set("--prompt-len", o.prompt_len, 1024, 256);
    set("--output-len", o.output_len, 32768, 512);
    set("--budget", o.budget, 2048, 512);
  } else if (o.protocol == "capacity") {
    // The paper's equal-memory runs (isomem scripts) use 128-token inputs.
    set("--prompt-len", o.prompt_len, 128, 128);
    set("--output-len", o.output_len, 32768, 512);
    set("--budget", o.budget, 1024, 512);
  } else if (o.protocol == "evict") {
    set("--prompt-len", o.prompt_len, 128, 128);
    set("--budget", o.budget, 1024, 512);
    set("--repeats", o.repeats, 20, 5);
  } else if (o.protocol == "latency") {
    if (unset("--policy")) o.policy = "full";
    set("--output-len", o.output_len, 512, 128);
    set("--long-context", o.long_context, 16384, 4096);
  }
}

void run(BenchFlags& f, const CLI::App& cmd) {
  bench::BenchOptions& o = f.options;
  if (!f.model.empty() && o.random_weights) fail("give --model or --random-weights --config FILE, not both");
  if (!o.config_path.empty() && !o.random_weights)
    fail("--config is the shape for --random-weights; add --random-weights");
  if (!f.model.empty()) o.model_path = resolve_model_argument(f.model).string();
  apply_defaults(o, cmd);
  o.bandwidth_bytes = static_cast<size_t>(f.bandwidth_mib) << 20;
  const Json run = bench::run_bench(o);
  if (!o.json_out.empty()) bench::append_json_run(o.json_out, run);
  if (!o.markdown_out.empty()) bench::append_markdown_row(o.markdown_out, run);
  fmt::print("kvdice bench {}: {} on {}\n  bandwidth {:.1f} GB/s ({})\n{}", o.protocol,
             run["model"].get<std::string>(), run["device"].get<std::string>(),
             run["bandwidth_gb_s"].get<double>(), run["bandwidth_method"].get<std::string>(),
             bench::summary_text(run));
  if (o.json_out.empty()) fmt::print("{}\n", run.dump(2));
  if (!run["validation"]["ok"].get<bool>()) {
    std::string problems;
    for (const Json& p : run["validation"]["problems"]) problems += "\n  " + p.get<std::string>();
    fail("bench validation FAILED (the run is recorded with validation.ok = false):{}", problems);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  bench::BenchOptions& o = f->options;
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark protocols: throughput, capacity, evict, latency");
  cmd->add_option("protocol", o.protocol, "throughput | capacity | evict | latency")
      ->required()
      ->check(CLI::IsMember({"throughput", "capacity", "evict", "latency"}));
  cmd->add_option("--model,-m", f->model,
                  "HF checkpoint directory, .gguf file, or a known model name ('default')");
  cmd->add_flag("--random-weights", o.random_weights,
                "Random weights of the --config shape (no checkpoint, no tokenizer)");
  cmd->add_option("--config", o.config_path, "HF config.json of the shape (configs/shapes/*.json)");
  add_seed_option(cmd, "--seed", o.seed, "Seed of the weights, prompts, sampling and eviction streams");
  add_backend_flags(cmd, o.backend);
  cmd->add_flag("--quick", o.quick, "Short form of the protocol (well under a minute on an H200)");
  cmd->add_flag("!--no-graphs", o.graphs, "Run decode steps eagerly (no CUDA graphs)");
  cmd->add_flag(
      "--fused-decode", o.fused_decode,
      "Run one-row decode steps through the fused decoder stack (CUDA; experimental, slower so far); "
      "latency then measures it and the op-by-op path side by side");
  add_int_option(cmd, "--requests", o.requests, 1, kMaxBatch, "throughput: requests, all in one batch");
  add_int_option(cmd, "--prompt-len", o.prompt_len, 1, kMaxTokens, "Prompt tokens per request (random ids)");
  add_int_option(cmd, "--output-len", o.output_len, 1, kMaxTokens,
                 "Tokens each request generates (EOS ignored)");
  cmd->add_option("--policy", o.policy, "Eviction policy (name[:key=value,...]); 'full' keeps everything");
  add_int_option(cmd, "--budget,-T", o.budget, 1, kMaxTokens,
                 "T: KV slots per sequence, layer and head after a round");
  add_int_option(cmd, "--window,-r", o.window, 1, kMaxTokens, "r: recency window and round cadence");
  cmd->add_option("--budget-convention", o.convention,
                  "reference (T counts prompt and window) or vllm (the vLLM port's)")
      ->check(CLI::IsMember({"reference", "vllm"}));
  add_temperature_option(cmd, "--temperature", o.temperature, "Sampling temperature (0 = greedy)");
  add_top_p_option(cmd, "--top-p", o.top_p, "Top-p");
  add_int_option(cmd, "--prefill-chunk", o.prefill_chunk, 1, kMaxTokens,
                 "Most prompt tokens of one prefill step");
  add_int_option(cmd, "--warmup-tokens", o.warmup_tokens, 0, kMaxTokens,
                 "Untimed tokens a request of the same load before the timed run (records each batch "
                 "shape's step graph; 0: none, the timed run pays it)");
  // Bounded here by the format; run_bench then holds it to the machine's memory before any allocation.
  add_number_option(cmd, "--memory-gib", o.memory_gib, 1.0 / (1 << 30), 1 << 20,
                    "capacity: KV pool memory (GiB) every policy gets (at most the machine's memory)");
  cmd->add_option("--batches", o.batches, "evict: batch sizes (default 1 128)")
      ->delimiter(',')
      ->transform(integer_in(1, kMaxBatch));
  cmd->add_option("--policies", o.policies, "evict: policies to time (default: every one the backend runs)")
      ->delimiter(',');
  add_int_option(cmd, "--repeats", o.repeats, 1, 100000, "evict: timed rounds per measurement");
  add_int_option(cmd, "--short-context", o.short_context, 1, kMaxTokens, "latency: short prompt length");
  add_int_option(cmd, "--long-context", o.long_context, 1, kMaxTokens, "latency: long prompt length");
  add_int_option(cmd, "--bandwidth-mib", f->bandwidth_mib, 1, 1 << 16,
                 "Copy-bandwidth probe buffer (MiB; CUDA uses at least 1024; two such buffers are allocated)");
  cmd->add_option("--json-out", o.json_out, "Append the run to this JSON file ({\"runs\": [...]})");
  cmd->add_option("--markdown-out", o.markdown_out, "Append one markdown table row per run to this file");
  cmd->callback([f, cmd] { run(*f, *cmd); });
}

}  // namespace kvdice::cli
