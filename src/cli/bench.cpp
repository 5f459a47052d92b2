// kvdice bench throughput|capacity|evict|latency|serve: the benchmark protocols of src/bench (docs/benchmarks.md).
#include <fmt/core.h>

#include <cmath>
#include <memory>

#include "bench/protocols.h"
#include "bench/report.h"
#include "bench/serve_bench.h"
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
  bench::ServeBenchOptions serve;
  std::string request_rate = "inf";
  std::string preset;  // evict: "table9"
};

// `bench evict --preset table9`: the paper's eviction-cost protocol (its Table 9): batch 1, K = 1024,
// r = 64 after a 256-token prompt, and the scoring settings of the reference's timing runs (smoothing on,
// n_large = K/4, softmax temperature 0.6, R-KV lambda 0.1) at the reference's precision: bf16 queries and
// keys, fp32 math (precision=fp32; the library's default stays the exact fp64). Flags given beside it
// win. TriAttention needs its statistics: name it with --policies triattention:stats=FILE.
void apply_table9_preset(bench::BenchOptions& o, const CLI::App& cmd) {
  auto unset = [&](const char* flag) { return cmd.count(flag) == 0; };
  if (unset("--batches")) o.batches = {1};
  if (unset("--budget")) o.budget = 1024;
  if (unset("--window")) o.window = 64;
  if (unset("--prompt-len")) o.prompt_len = 256;
  if (unset("--policies"))
    o.policies = {"random_pp", "snapkv_pp:pool=5,temperature=0.6,precision=fp32",
                  "rkv_pp:lambda=0.1,pool=5,temperature=0.6,precision=fp32",
                  "vase_pp:large=0.25,pool=5,temperature=0.6,precision=fp32"};
}

// --policies splits at every comma, which also splits a spec's own options ("snapkv_pp:pool=5,
// temperature=0.6"): a piece without a ':' that holds a '=' is an option of the spec before it. A first
// piece of that form has no spec to join and is left for make_policy to refuse.
void join_policy_options(std::vector<std::string>& policies) {
  std::vector<std::string> joined;
  for (const std::string& piece : policies) {
    if (piece.empty() || piece.front() == '-')
      fail("--policies: '{}' is not a policy spec (an empty name between commas, or a flag where a spec belongs)",
           piece);
    const bool option = piece.find(':') == std::string::npos && piece.find('=') != std::string::npos;
    if (option && !joined.empty())
      joined.back() += "," + piece;
    else
      joined.push_back(piece);
  }
  policies = std::move(joined);
}

// Flags that only `serve` reads, and flags of the other protocols that `serve` does not read: either
// given to the wrong protocol is an error, never silently ignored.
const char* const kServeOnlyFlags[] = {"--url",          "--api-key",      "--served-model",
                                       "--num-requests", "--request-rate", "--max-concurrency",
                                       "--range-ratio",  "--prompt-vocab", "--timeout",
                                       "--max-duration", "--max-batch",    "--max-queue",
                                       "--save-detailed"};
const char* const kNotServeFlags[] = {"--requests", "--no-graphs",
                                      "--memory-gib",     "--batches",       "--policies",
                                      "--repeats",     "--short-context",  "--long-context",  "--bandwidth-mib",
                                      "--budget-convention", "--prefill-chunk", "--preset"};

void check_protocol_flags(const std::string& protocol, const CLI::App& cmd) {
  const bool serve = protocol == "serve";
  for (const char* flag : kServeOnlyFlags)
    if (!serve && given(&cmd, flag)) fail("{} is a flag of bench serve, not of bench {}", flag, protocol);
  if (protocol != "evict" && given(&cmd, "--max-context"))
    fail("--max-context is a flag of bench evict, not of bench {}", protocol);
  if (serve)
    for (const char* flag : kNotServeFlags)
      if (given(&cmd, flag))
        fail("{} is not a flag of bench serve (it measures a server: see kvdice bench --help)", flag);
}

// --request-rate: requests per second, or inf (every request at time 0).
CLI::Validator request_rate_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text == "inf") return "";
        std::string copy = text;
        const std::string problem = number_in(1e-6, 1e9)(copy);
        return problem.empty() ? "" : "a number of requests per second in [1e-06, 1e9], or inf";
      },
      "RATE|inf");
}

// A protocol's defaults where the user gave no value: the paper's settings, or --quick's (each
// protocol well under a minute on an H200 with the Qwen3-4B shape).
void apply_defaults(bench::BenchOptions& o, const CLI::App& cmd) {
  auto unset = [&](const char* flag) { return cmd.count(flag) == 0; };
  const bool q = o.quick;
  auto set = [&](const char* flag, int& field, int full, int quick) {
    if (unset(flag)) field = q ? quick : full;
  };
  // On the CPU (the fp32 reference) --quick also shrinks the batch, so the fixture runs in seconds.
  const bool cpu = backend::runs_on_cpu(o.backend);
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
  } else if (o.protocol == "serve") {
    // vLLM's random dataset: 1k in, 128 out, 1000 prompts.
    set("--prompt-len", o.prompt_len, 1024, 128);
    set("--output-len", o.output_len, 128, 32);
  } else if (o.protocol == "latency") {
    if (unset("--policy")) o.policy = "full";
    set("--output-len", o.output_len, 512, 128);
    set("--long-context", o.long_context, 16384, 4096);
  }
}

void run_serve(BenchFlags& f, const CLI::App& cmd) {
  bench::BenchOptions& o = f.options;
  bench::ServeBenchOptions& s = f.serve;
  if (!s.url.empty() && (!f.model.empty() || o.random_weights))
    fail("give --url (a running server) or --model (started here), not both");
  if (o.random_weights || !o.config_path.empty())
    fail("bench serve starts kvdice serve, which needs a tokenizer: give --model DIR (a checkpoint; "
         "tools/gpu/make_checkpoint.py writes random weights of a real shape with one), or --url");
  if (s.url.empty() && f.model.empty()) fail("bench serve needs --model PATH|default (started here) or --url http://HOST:PORT");
  if (!s.url.empty())
    for (const char* flag : {"--max-batch", "--max-queue", "--policy", "--budget", "--window", "--backend"})
      if (given(&cmd, flag)) fail("{} configures the server bench serve starts; with --url the server has its own", flag);
  s.request_rate = f.request_rate == "inf" ? INFINITY : std::stod(f.request_rate);
  if (!given(&cmd, "--num-requests") && o.quick) {
    const bool cpu = backend::runs_on_cpu(o.backend);
    s.num_requests = cpu && s.url.empty() ? 8 : 64;
  }
  if (!f.model.empty()) o.model_path = resolve_model_argument(f.model).string();
  const Json run = bench::run_serve_bench(o, s);
  if (!o.json_out.empty()) bench::append_json_run(o.json_out, run);
  if (!o.markdown_out.empty()) bench::append_markdown_row(o.markdown_out, run);
  fmt::print("kvdice bench serve: {} on {}\n{}", run["model"].get<std::string>(), run["device"].get<std::string>(),
             bench::summary_text(run));
  if (o.json_out.empty()) fmt::print("{}\n", run.dump(2));
  if (!run["validation"]["ok"].get<bool>()) {
    std::string problems;
    for (const Json& p : run["validation"]["problems"]) problems += "\n  " + p.get<std::string>();
    fail("bench serve validation FAILED (the run is recorded with validation.ok = false):{}", problems);
  }
}

void run(BenchFlags& f, const CLI::App& cmd) {
  bench::BenchOptions& o = f.options;
  check_protocol_flags(o.protocol, cmd);
  if (o.protocol == "serve") {
    apply_defaults(o, cmd);
    return run_serve(f, cmd);
  }
  if (!f.model.empty() && o.random_weights) fail("give --model or --random-weights --config FILE, not both");
  if (!o.config_path.empty() && !o.random_weights)
    fail("--config is the shape for --random-weights; add --random-weights");
  if (!f.model.empty()) o.model_path = resolve_model_argument(f.model).string();
  apply_defaults(o, cmd);
  join_policy_options(o.policies);
  if (f.preset == "table9") {  // after the defaults: --quick's batch sizes do not apply to it
    if (o.protocol != "evict") fail("--preset table9 is a preset of bench evict, not of bench {}", o.protocol);
    apply_table9_preset(o, cmd);
  }
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
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark protocols: throughput, capacity, evict, latency, serve");
  cmd->add_option("protocol", o.protocol, "throughput | capacity | evict | latency | serve")
      ->required()
      ->check(CLI::IsMember({"throughput", "capacity", "evict", "latency", "serve"}));
  cmd->add_option("--model,-m", f->model,
                  "HF checkpoint directory, .gguf file, or a known model name ('default')");
  cmd->add_flag("--random-weights", o.random_weights,
                "Random weights of the --config shape (no checkpoint, no tokenizer)");
  cmd->add_option("--config", o.config_path, "HF config.json of the shape (configs/shapes/*.json)");
  add_seed_option(cmd, "--seed", o.seed, "Seed of the weights, prompts, sampling and eviction streams");
  add_backend_flags(cmd, o.backend);
  cmd->add_flag("--quick", o.quick, "Short form of the protocol (well under a minute on an H200)");
  cmd->add_flag("!--no-graphs", o.graphs, "Run decode steps eagerly (no CUDA graphs)");
  add_int_option(cmd, "--requests", o.requests, 1, kMaxBatch, "throughput: requests, all in one batch");
  add_int_option(cmd, "--prompt-len,--input-len", o.prompt_len, 1, kMaxTokens, "Prompt tokens per request (random ids)");
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
  cmd->add_option("--policies", o.policies,
                  "evict: policies to time, name[:key=value,...] each (default: every one the backend runs)")
      ->delimiter(',');
  add_int_option(cmd, "--repeats", o.repeats, 1, 100000, "evict: timed rounds per measurement");
  add_int_option(
      cmd, "--max-context", o.max_context, 0, kMaxTokens,
      "evict: the decode batch's page tables as wide as a context of N slots, as the engine builds "
      "them (kvdice serve: the model's maximum position); 0: T + r, the pool's own");
  cmd->add_option("--preset", f->preset,
                  "evict: table9 = the paper's eviction-cost protocol (batch 1, T=1024, r=64, 256-token prompt, "
                  "the reference's timing settings for snapkv_pp, rkv_pp, vase_pp beside random_pp)")
      ->check(CLI::IsMember({"table9"}));
  add_int_option(cmd, "--short-context", o.short_context, 1, kMaxTokens, "latency: short prompt length");
  add_int_option(cmd, "--long-context", o.long_context, 1, kMaxTokens, "latency: long prompt length");
  add_int_option(cmd, "--bandwidth-mib", f->bandwidth_mib, 1, 1 << 16,
                 "Copy-bandwidth probe buffer (MiB; CUDA uses at least 1024; two such buffers are allocated)");
  bench::ServeBenchOptions& s = f->serve;
  cmd->add_option("--url", s.url, "serve: a running OpenAI-compatible server, http://HOST:PORT (default: start kvdice serve here)");
  cmd->add_option("--api-key", s.api_key, "serve: sent as 'Authorization: Bearer KEY' (the server started here requires it)");
  cmd->add_option("--served-model", s.served_model, "serve: the request's \"model\" (default: 'default' here, none with --url)");
  add_int_option(cmd, "--num-requests", s.num_requests, 1, 1000000, "serve: requests sent (default 1000)");
  cmd->add_option("--request-rate", f->request_rate,
                  "serve: Poisson arrivals at this many requests/s, or inf: all at once (default inf)")
      ->check(request_rate_check());
  add_int_option(cmd, "--max-concurrency", s.max_concurrency, 1, 1000000,
                 "serve: requests in flight at most (default: no cap)");
  add_number_option(cmd, "--range-ratio", s.range_ratio, 0.0, 0.999,
                    "serve: prompt and output lengths uniform in [len (1 - ratio), len (1 + ratio)] (default 0)");
  add_int_option(cmd, "--prompt-vocab", s.prompt_vocab, 1, 1 << 24,
                 "serve: prompt ids uniform in [0, N) (default: the model's vocabulary; 1000 with --url)");
  add_number_option(cmd, "--timeout", s.timeout_s, 0.001, 86400, "serve: seconds a request may take (default 600)");
  add_number_option(cmd, "--max-duration", s.max_duration_s, 0.001, 864000,
                    "serve: seconds the load may run from its first send; then no request is sent and those "
                    "running end, and the record keeps what finished (marked not valid)");
  add_int_option(cmd, "--max-batch", s.max_batch, 1, kMaxBatch,
                 "serve: the started server's --max-batch (default kvdice serve's)");
  add_int_option(cmd, "--max-queue", s.max_queue, 1, 1 << 20,
                 "serve: the started server's --max-queue (default --num-requests: no 429 from the load)");
  cmd->add_flag("--save-detailed", s.save_detailed,
                "serve: record every request (times, ITL gaps, tokens, error) in the JSON run");
  cmd->add_option("--json-out", o.json_out, "Append the run to this JSON file ({\"runs\": [...]})");
  cmd->add_option("--markdown-out", o.markdown_out, "Append one markdown table row per run to this file");
  cmd->callback([f, cmd] { run(*f, *cmd); });
}

}  // namespace kvdice::cli
