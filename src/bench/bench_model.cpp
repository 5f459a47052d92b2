#include "bench/bench_model.h"

#include <chrono>

#include "core/error.h"
#include "core/philox.h"
#include "model/random_weights.h"

namespace kvdice::bench {

BenchModel load_bench_model(const BenchOptions& options, const model::LoadOptions& load) {
  const auto start = std::chrono::steady_clock::now();
  BenchModel out;
  if (options.random_weights) {
    if (options.config_path.empty())
      fail("--random-weights needs --config FILE (an HF config.json, e.g. configs/shapes/qwen3-4b.json)");
    const model::ModelConfig config = model::read_shape_config(options.config_path);
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
