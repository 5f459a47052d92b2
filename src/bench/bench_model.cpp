#include "bench/bench_model.h"

#include <chrono>

#include "backend/backend.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/philox.h"
#include "model/random_weights.h"
#include "model/weights.h"

namespace kvdice::bench {
namespace {

// Random weights are generated in fp32 and kept by the model; a backend whose memory is the host's (the
// CPU's) copies them into its own fp32 buffer again (ForwardPass). A shape that cannot fit is refused
// before anything is generated, where the kernel's OOM killer would end the process part way.
void check_random_weights_fit(const model::ModelConfig& config, const BenchOptions& options) {
  const std::optional<uint64_t> available = available_host_memory();
  if (!available) return;
  const int64_t parameters = model::parameter_count(config);
  const bool host_backend = backend::runs_on_cpu(options.backend);
  const double bytes = static_cast<double>(parameters) * sizeof(float) * (host_backend ? 2 : 1);
  if (bytes > static_cast<double>(*available))
    fail(
        "--random-weights: the shape in {} has {:.2f}B parameters, whose fp32 weights take about {:.1f} GB of "
        "host memory{}, and {:.1f} GB is available (MemAvailable); use a smaller shape or a machine with more "
        "memory",
        options.config_path, static_cast<double>(parameters) * 1e-9, bytes * 1e-9,
        host_backend ? " (the model's and the CPU backend's copy)" : "", static_cast<double>(*available) * 1e-9);
}

}  // namespace

BenchModel load_bench_model(const BenchOptions& options, const model::LoadOptions& load) {
  const auto start = std::chrono::steady_clock::now();
  BenchModel out;
  if (options.random_weights) {
    if (options.config_path.empty())
      fail("--random-weights needs --config FILE (an HF config.json, e.g. configs/shapes/qwen3-4b.json)");
    const model::ModelConfig config = model::read_shape_config(options.config_path);
    check_random_weights_fit(config, options);
    out.owned = model::make_random_model(config, options.seed);
    out.source = fmt::format("random weights (uniform, std 0.02, norms 1, seed {}) of the shape in {}",
                             options.seed, options.config_path);
  } else {
    if (options.model_path.empty())
      fail("kvdice bench needs --model PATH|default or --random-weights --config FILE");
    out.bundle = engine::load_model_bundle(options.model_path, load);
    out.source = fmt::format("checkpoint {} ({})", out.bundle.source, out.bundle.format);
  }
  out.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::vector<int> random_prompt(int vocab, int length, uint64_t seed, uint64_t index) {
  // The prompt domain of the generator: a key no sampling or eviction stream uses.
  const PhiloxStream stream{philox_key(seed, index, static_cast<RngDomain>(0x50524f4dull)), 0, 0, 0};
  std::vector<int> prompt(static_cast<size_t>(length));
  for (int i = 0; i < length; ++i)
    prompt[static_cast<size_t>(i)] =
        static_cast<int>(stream.uniform_below(static_cast<uint32_t>(i), static_cast<uint32_t>(vocab)));
  return prompt;
}

Json model_shape_json(const model::ModelConfig& c) {
  return Json{{"architecture", c.architecture}, {"layers", c.n_layers}, {"hidden", c.hidden},
              {"intermediate", c.intermediate}, {"heads", c.n_heads},   {"kv_heads", c.n_kv_heads},
              {"head_dim", c.head_dim},         {"vocab", c.vocab},     {"tied_embeddings", c.tie_embeddings},
              {"qkv_bias", c.qkv_bias},         {"qk_norm", c.qk_norm}};
}

}  // namespace kvdice::bench
