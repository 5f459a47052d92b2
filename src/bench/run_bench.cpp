#include <chrono>

#include "bench/bench_model.h"
#include "bench/protocols.h"
#include "bench/report.h"
#include "core/error.h"
#include "core/log.h"

namespace kvdice::bench {

Json run_bench(const BenchOptions& options) {
  static const std::vector<std::string> kProtocols = {"throughput", "capacity", "evict", "latency"};
  if (std::find(kProtocols.begin(), kProtocols.end(), options.protocol) == kProtocols.end())
    fail("unknown bench protocol '{}' (expected one of: throughput, capacity, evict, latency)",
         options.protocol);
  Json run = run_header();
  run["protocol"] = options.protocol;
  run["quick"] = options.quick;

  std::unique_ptr<backend::Backend> backend = backend::make_backend(options.backend);
  BenchModel model = load_bench_model(options, {backend->block_weight_types()});
  run["model"] = model.source;
  run["model_shape"] = model_shape_json(model.model().config());
  run["model_parameters"] = model.model().weights().parameter_count();
  run["model_load_seconds"] = model.load_seconds;
  run["prompts"] = fmt::format(
      "random token ids, uniform over the vocabulary, seeded (seed {}); no tokenizer", options.seed);
  run["device"] = backend->name();
  const double bandwidth = backend->measure_copy_bandwidth(options.bandwidth_bytes, options.quick ? 5 : 20);
  run["bandwidth_gb_s"] = bandwidth / 1e9;
  run["bandwidth_method"] = fmt::format(
      "best of {} copies of a {:.2f} GiB buffer on the device ({}), reads plus writes counted",
      options.quick ? 5 : 20,
      static_cast<double>(backend->is_cpu() ? options.bandwidth_bytes
                                            : std::max(options.bandwidth_bytes, size_t{1} << 30)) /
          (1 << 30),
      backend->is_cpu() ? "memcpy" : "cudaMemcpyAsync device to device, CUDA events");

  const BenchContext ctx{options, model.model(), *backend, bandwidth};
  Json body;
  if (options.protocol == "throughput") body = run_throughput(ctx);
  if (options.protocol == "capacity") body = run_capacity(ctx);
  if (options.protocol == "evict") body = run_evict(ctx);
  if (options.protocol == "latency") body = run_latency(ctx);
  if (const std::string choices = backend->kernel_choices(); !choices.empty()) run["kernel_choices"] = choices;
  run["parameters"] = body["parameters"];
  run["parameters"]["seed"] = options.seed;
  run["parameters"]["graphs"] = options.graphs;
  run["parameters"]["fused_decode"] = options.fused_decode;
  run["results"] = body["results"];
  run["peak_memory_bytes"] = backend->peak_memory_bytes();
  run["peak_memory_method"] = backend->is_cpu()
                                  ? "peak resident set size of the process (getrusage)"
                                  : "high-water mark of the device's used memory (cudaMemGetInfo)";
  bool ok = true;
  Json problems = Json::array();
  for (const Json& r : run["results"]) {
    ok = ok && r["validation"]["ok"].get<bool>();
    for (const Json& p : r["validation"]["problems"])
      problems.push_back(r.value("label", "") + ": " + p.get<std::string>());
  }
  run["validation"] = Json{{"ok", ok}, {"problems", problems}};
  return run;
}

}  // namespace kvdice::bench
