// kvdice_fused_decode: the fused decoder stack (decode_stack.cu) against the library's op-by-op decode
// step, on one GPU, with random weights of a config.json shape. For each context it first checks the
// two against each other (the op-by-op layers define what the kernel computes), then times each as a
// recorded graph of one decode step (embed, layers, final norm, logits; no sampling) replayed step
// after step. README.md in this folder says what the figures were and how to read them.
//
//   kvdice_fused_decode --config configs/shapes/qwen3-4b.json [--contexts 128,1024] [--steps 256]
//
// Exit status 0 when every check passed, 1 when one failed, 2 on bad input or a refused shape.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/row_diff.h"
#include "backend/step_storage.h"
#include "core/step_row.h"
#include "core/error.h"
#include "fused_stack.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/random_weights.h"

namespace kvdice::fused_decode {
namespace {

struct Options {
  std::string config_path;
  uint64_t seed = 5;
  std::vector<int> contexts{128, 1024};
  int steps = 256;        // timed decode steps per context and path
  int warmup_steps = 16;  // untimed replays before them
  int check_steps = 6;    // decode steps compared logit by logit per context
};

class Driver {
 public:
  Driver(const model::Model& model, backend::Backend& be, int max_context, int64_t max_slots)
      : model_(model),
        be_(be),
        pass_(model, be, max_context, 1, 1),
        pool_(be, model.kv_shape(), (max_slots + kv::KvPool::kDefaultPageSlots - 1) / kv::KvPool::kDefaultPageSlots + 1),
        pages_(pool_.allocate(max_slots)),
        prefill_(be, 1, max_context, static_cast<int>(pages_.size())),
        fused_(model, pass_, pool_, be) {}
  ~Driver() {
    be_.synchronize();
    be_.drop_graphs(this);
  }

  // The sequence's first `context` slots: one prefill step (op by op, as the library runs it).
  void prefill(int context) {
    backend::StepBatch& b = prefill_.host();
    std::vector<int32_t> tokens(static_cast<size_t>(context));
    for (int i = 0; i < context; ++i) tokens[i] = token(i);
    const auto pages = static_cast<size_t>(b.max_pages);
    b.n_seqs = 1;
    b.n_rows = backend::write_row(b, 0, 0, {.tokens = tokens, .pages = {pages_.data(), pages}});
    b.max_rows_per_seq = context;
    prefill_.upload_all();
    pass_.run(prefill_.device(), pool_, false);
    be_.synchronize();
  }

  // A decode batch whose page table covers `slots` slots, as an engine sizes it for a sequence's
  // reservation (the attention kernels' split plan follows the table's size, not the length).
  void size_decode(int64_t slots) {
    be_.synchronize();
    be_.drop_graphs(this);  // they bake in the batch being replaced
    const auto pages = static_cast<int>((slots + kv::KvPool::kDefaultPageSlots - 1) / kv::KvPool::kDefaultPageSlots);
    decode_ = std::make_unique<backend::StepStorage>(be_, 1, 1, pages);
  }

  // The decode batch at `length` slots, feeding `tok`.
  backend::StepBatch at(int length, int tok) {
    backend::StepBatch& b = decode_->host();
    const int32_t token_row[1] = {tok};
    b.n_seqs = 1;
    b.n_rows = backend::write_row(b, 0, 0, {.tokens = token_row, .length = length, .appended = length,
                                            .pages = {pages_.data(), static_cast<size_t>(b.max_pages)}});
    b.max_rows_per_seq = 1;
    decode_->upload_all();
    return decode_->device();
  }

  backend::View step(bool fused, const backend::StepBatch& batch) {
    return fused ? fused_.run(batch) : pass_.run(batch, pool_, false);
  }

  // Logits of `n` decode steps from `context`, eagerly; each path writes its own K/V of those steps.
  std::vector<std::vector<float>> logits(bool fused, int context, int n) {
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < n; ++i) {
      const backend::View out = step(fused, at(context + i, token(context + i)));
      std::vector<float> row(static_cast<size_t>(out.cols));
      be_.download_matrix(out, row.data());
      rows.push_back(std::move(row));
    }
    return rows;
  }

  // Decode steps a second: one step recorded as a graph (with the batch's advance), replayed `steps`
  // times after `warmup` untimed replays, from `context`.
  double tokens_per_second(bool fused, int context, int warmup, int steps) {
    const uint64_t key = fused ? 1 : 0;
    const backend::StepBatch batch = at(context, token(context));
    step(fused, batch);  // eagerly once: one-time setup happens outside the recording
    be_.advance(batch);
    be_.synchronize();
    at(context, token(context));
    if (!be_.begin_capture()) fail("the {} backend records no graphs", be_.name());
    step(fused, batch);
    be_.advance(batch);
    be_.end_capture(this, key);
    for (int i = 0; i < warmup; ++i) replay(key);
    be_.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) replay(key);
    be_.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return steps / seconds;
  }

 private:
  int token(int position) const { return (position * 131 + 7) % model_.config().vocab; }
  void replay(uint64_t key) {
    if (!be_.replay(this, key)) fail("decode graph {} does not replay (a backend buffer moved)", key);
  }

  const model::Model& model_;
  backend::Backend& be_;
  model::ForwardPass pass_;
  kv::KvPool pool_;
  std::vector<int32_t> pages_;
  backend::StepStorage prefill_;
  std::unique_ptr<backend::StepStorage> decode_;
  FusedStep fused_;
};

int run(const Options& o) {
  const model::ModelConfig config = model::read_shape_config(o.config_path);
  // Before the weights: a machine without a GPU stops here.
  if (!backend::cuda_available()) fail("the fused decoder stack runs on a CUDA GPU, and none is visible here");
  auto be = backend::make_backend({"cuda"});
  const auto model = model::make_random_model(config, o.seed, 0.05f);
  const int max_context = *std::max_element(o.contexts.begin(), o.contexts.end());
  const int64_t max_slots = int64_t{max_context} + 2 + o.warmup_steps + o.steps + o.check_steps;
  if (max_slots > config.max_position)
    fail("--contexts {} with {} steps exceed the shape's {} positions", max_context, o.steps, config.max_position);
  Driver driver(*model, *be, max_context, max_slots);
  std::printf("%s\n%s: %d layers, hidden %d, %d/%d heads of %d, intermediate %d\n", be->name().c_str(),
              o.config_path.c_str(), config.n_layers, config.hidden, config.n_heads, config.n_kv_heads,
              config.head_dim, config.intermediate);
  std::printf("%8s  %14s  %14s  %8s  %s\n", "context", "op-by-op tok/s", "fused tok/s", "fused/op",
              "check: worst relative error (fused vs op by op), repeat bit-identical");
  bool ok = true;
  for (const int context : o.contexts) {
    driver.size_decode(int64_t{context} + 2 + o.warmup_steps + o.steps + o.check_steps);
    driver.prefill(context);
    const auto op_by_op = driver.logits(false, context, o.check_steps);
    const auto fused = driver.logits(true, context, o.check_steps);
    const auto again = driver.logits(true, context, o.check_steps);
    double worst = 0;
    bool top1 = true, same = true;
    for (size_t r = 0; r < fused.size(); ++r) {
      const test::RowDiff d = test::compare_rows(fused[r], op_by_op[r]);
      worst = std::max(worst, d.relative);
      top1 = top1 && d.top1_ok();
      same = same && fused[r] == again[r];
    }
    const bool passed = worst < 1e-2 && top1 && same;
    ok = ok && passed;
    const double slow = driver.tokens_per_second(false, context, o.warmup_steps, o.steps);
    const double fast = driver.tokens_per_second(true, context, o.warmup_steps, o.steps);
    std::printf("%8d  %14.1f  %14.1f  %8.3f  %.3e%s%s%s\n", context, slow, fast, fast / slow, worst,
                same ? ", yes" : ", NO", top1 ? "" : ", top-1 differs beyond a near-tie",
                passed ? "" : "  FAILED");
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kvdice::fused_decode

int main(int argc, char** argv) {
  kvdice::fused_decode::Options o;
  CLI::App app{"The fused decoder stack against the op-by-op decode step (CUDA, batch 1)"};
  app.add_option("--config", o.config_path, "HF config.json of the shape (configs/shapes/*.json)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--seed", o.seed, "Seed of the random weights");
  app.add_option("--contexts", o.contexts, "Contexts to measure at (slots already in the cache)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", o.steps, "Timed decode steps per context and path")->check(CLI::Range(1, 1 << 20));
  app.add_option("--warmup-steps", o.warmup_steps, "Untimed decode steps before them")->check(CLI::Range(0, 1 << 20));
  app.add_option("--check-steps", o.check_steps, "Decode steps compared logit by logit")->check(CLI::Range(1, 1024));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is not an error
  }
  try {
    return kvdice::fused_decode::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvdice_fused_decode: %s\n", e.what());
    return 2;
  }
}
