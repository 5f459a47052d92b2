#include <chrono>

#include "bench/bench_model.h"
#include "bench/protocols.h"
#include "bench/report.h"
#include "core/error.h"
#include "core/log.h"

namespace kvdice::bench {
namespace {

constexpr double kGiB = 1073741824.0;

// Sizes given as flags are held to the backend's memory (RAM on the CPU, device memory on CUDA) before
// anything is loaded or allocated: a typo is an error naming the flag, never a run that eats the machine.
void check_sizes_against_memory(const BenchOptions& o, const backend::Backend& backend) {
  const double total_gib = static_cast<double>(backend.memory().total_bytes) / kGiB;
  if (o.protocol == "capacity") {
    if (!(o.memory_gib > 0.0)) fail("capacity needs --memory-gib G: the KV memory (GiB) every policy gets");
    if (o.memory_gib > total_gib)
      fail("--memory-gib {} is more than the {:.1f} GiB of memory on {}", o.memory_gib, total_gib,
           backend.name());
  }
  // The bandwidth probe copies between two buffers of this size.
  if (2.0 * static_cast<double>(o.bandwidth_bytes) > total_gib * kGiB)
    fail("--bandwidth-mib {}: two buffers of that size do not fit the {:.1f} GiB of memory on {}",
         o.bandwidth_bytes >> 20, total_gib, backend.name());
}

}  // namespace

void check_bench_options(const BenchOptions& o, const backend::Backend& backend) {
  if (o.protocol == "evict") {
    check_evict_options(o, backend);
    return;
  }
  const std::vector<BenchOptions> loads =
      o.protocol == "latency" ? std::vector{latency_load(o, o.short_context), latency_load(o, o.long_context)}
                              : std::vector{o};
  for (const BenchOptions& one : loads) load_spec(one, o.policy);  // the policy, budget and prompt
  backend.check_policy(*policy::make_policy(o.policy));
}

Json run_bench(const BenchOptions& options) {
  static const std::vector<std::string> kProtocols = {"throughput", "capacity", "evict", "latency"};
  if (std::find(kProtocols.begin(), kProtocols.end(), options.protocol) == kProtocols.end())
    fail("unknown bench protocol '{}' (expected one of: throughput, capacity, evict, latency)",
         options.protocol);
  Json run = run_header();
  run["protocol"] = options.protocol;
  run["quick"] = options.quick;

  std::unique_ptr<backend::Backend> backend = backend::make_backend(options.backend);
  check_sizes_against_memory(options, *backend);
  check_bench_options(options, *backend);
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
  if (const std::string choices = backend->kernel_choices(); !choices.empty())
    run["kernel_choices"] = choices;
  run["parameters"] = body["parameters"];
  run["parameters"]["seed"] = options.seed;
  run["parameters"]["graphs"] = options.graphs;
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
