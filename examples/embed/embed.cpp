// Minimal embedding of libkvdice: load a checkpoint, generate from a raw prompt under a KV budget on
// the CPU, print the text and the sequence's KV statistics.
//   embed MODEL_DIR_OR_GGUF PROMPT MAX_NEW_TOKENS [POLICY BUDGET WINDOW]
// It decodes all MAX_NEW_TOKENS (end-of-sequence ids are ignored) so that rounds fire on short runs.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 7) {
    std::fprintf(stderr, "usage: %s MODEL PROMPT MAX_NEW_TOKENS [POLICY BUDGET WINDOW]\n", argv[0]);
    return 2;
  }
  try {
    using namespace kvdice;
    engine::ModelBundle bundle = engine::load_model_bundle(argv[1]);
    auto backend = backend::make_cpu_backend(/*threads=*/1);

    engine::EngineConfig config;
    if (argc == 7) {
      config.kv.policy = argv[4];
      config.kv.budget.budget = std::atoi(argv[5]);
      config.kv.budget.window = std::atoi(argv[6]);
    } else {
      config.kv.policy = "full";
    }
    config.max_batch = 1;
    engine::Engine eng(*bundle.model, *backend, config);

    engine::GenerationRequest request;
    request.prompt = engine::encode_raw_prompt(bundle, argv[2]);
    request.max_new_tokens = std::atoi(argv[3]);
    request.ignore_eos = true;
    eng.submit(std::move(request));
    eng.run();

    for (const engine::GenerationResult& r : eng.take_finished()) {
      std::printf("text: %s\n", bundle.tokenizer->decode(r.tokens).c_str());
      std::printf("finish: %s, prompt %d, generated %d, eviction rounds %d, resident slots %d\n",
                  std::string(engine::finish_reason_name(r.finish)).c_str(), r.stats.prompt_tokens,
                  r.stats.generated_tokens, r.stats.eviction_rounds, r.stats.final_resident_slots);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed: %s\n", e.what());
    return 1;
  }
}
