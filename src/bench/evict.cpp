// evict: the cost of one eviction round, timed on the backend's evict op over a KV pool filled to the
// trigger point (every sequence at T + r resident slots, positions 0..T+r-1), per layer call (one
// layer) and per whole model (every layer in one call), at each batch size, for each policy; and its
// share of decode time: round / (r x step + round), the step time measured by decode steps (forward,
// sample, advance) over the same filled pool at the cycle's mean resident length (T + r/2 slots), with
// the policy's signals recorded as in a real run; and the prefill of a prompt (--prompt-len tokens into an
// empty sequence beside the pool, in steps of at most the engine's prefill chunk, eager as the engine
// runs it), with and without the signals, since a signal a prefill step records is paid by every prompt
// that arrives while others decode. The pool holds the model's own K/V: one template
// sequence is prefilled with T + r pseudo-random tokens (drawn from --seed) and copied into every
// sequence before each timed round and step (a round compacts the pool; the copy puts it back), so the
// scores a policy computes have the spread real keys give, not the ties of an empty pool.
// Where the backend records graphs, the timed round is a recorded graph replay (as inside the engine's
// decode graph); otherwise the op runs eagerly. A policy that scores the whole model at once
// (TriAttention: one keep-set per KV head shared by all layers) has no one-layer call: its per-layer
// figure is the whole-model round over the layer count, and says so. A policy that records signals
// on every step (the query ring, attention mass, value ranges) also gets the step timed without them
// (the same pool's step with its signal arrays left out, in turn with the one that records them) and
// the share of decode its round and signals take.
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <span>

#include "backend/step_storage.h"
#include "bench/bench_model.h"
#include "bench/protocols.h"
#include "core/error.h"
#include "core/step_row.h"
#include "engine/engine.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "policy/cuda_selection.h"
#include "policy/eviction_policy.h"

namespace kvdice::bench {
namespace {
using Clock = std::chrono::steady_clock;

// The signals a policy has recorded on every decode step, for the report.
std::string signal_names(const policy::SignalNeeds& needs) {
  std::vector<std::string> names;
  if (needs.window_queries) names.emplace_back("query ring");
  if (needs.accumulated_attention) names.emplace_back("attention mass");
  if (needs.value_ranges) names.emplace_back("value ranges");
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

struct RoundTiming {
  double mean_ms = 0.0, min_ms = 0.0;
  bool graph = false;
  std::vector<std::string> problems;
};

// Rows of one prefill step of the template sequence (the decode forward's arena holds at least these).
constexpr int kFillRows = 256;
// Rows of one prefill step of the timed prompt: the engine's prefill chunk.
const int kPromptChunk = engine::EngineConfig{}.prefill_chunk;

// A pool of `batch` sequences at T + r slots each, and the decode batch that points at them.
class FilledPool {
 public:
  FilledPool(const BenchContext& ctx, model::ForwardPass& forward, const policy::EvictionPolicy& policy,
             int batch, const kv::BudgetSpec& budget, int prompt_len)
      : backend_(ctx.backend), batch_(batch), budget_(budget) {
    const model::ModelConfig& mc = ctx.model.config();
    const int page_slots = kv::KvPool::kDefaultPageSlots;
    len_ = budget.budget + budget.window;
    pages_per_seq_ = (len_ + page_slots - 1) / page_slots;
    const int pages_per_seq = pages_per_seq_;
    // The decode batch's page tables: T + r, or as wide as the engine builds them for --max-context
    // (kernels size grids and scratch by the table's width, not by the sequences' lengths).
    const int table_pages = std::max(pages_per_seq, (ctx.options.max_context + page_slots - 1) / page_slots);
    // The batch's sequences, the template and the timed prompt. The query ring (window queries) holds
    // one row of r queries per sequence, as in the engine.
    const int prompt_pages = (prompt_len + page_slots - 1) / page_slots;
    pool_ = std::make_unique<kv::KvPool>(
        backend_, ctx.model.kv_shape(), int64_t{batch + 1} * pages_per_seq + prompt_pages, page_slots,
        policy.needs(), kv::QueryRingShape{batch + 2, budget.window, mc.n_heads});
    storage_ = std::make_unique<backend::StepStorage>(backend_, batch, batch, table_pages);
    backend::StepBatch& b = storage_->host();
    b.n_seqs = b.n_rows = batch;
    b.max_rows_per_seq = 1;
    pages_.resize(static_cast<size_t>(batch));
    rows_.resize(static_cast<size_t>(batch));
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t>& pages = pages_[static_cast<size_t>(s)];
      pages = pool_->allocate(len_);
      KVDICE_CHECK(!pages.empty(), "evict bench: the pool is sized for the batch");
      backend::SeqRow& row = rows_[static_cast<size_t>(s)];
      row.tokens = kToken;
      row.length = row.appended = len_;
      row.pages = pages;
      row.budget = budget.budget;
      row.window = budget.window;
      row.n_protected = policy.protects_prompt() ? budget.protected_slots(prompt_len) : 0;
      row.ring_row = policy.needs().window_queries ? pool_->allocate_ring_row() : -1;
      row.evict_key = philox_key(ctx.options.seed, static_cast<uint64_t>(s), RngDomain::Eviction);
      row.sample_key = philox_key(ctx.options.seed, static_cast<uint64_t>(s), RngDomain::Sampling);
      backend::write_row(b, s, s, row);
    }
    template_pages_ = pool_->allocate(len_);
    KVDICE_CHECK(!template_pages_.empty(), "evict bench: the pool is sized for the template");
    template_ring_row_ = policy.needs().window_queries ? pool_->allocate_ring_row() : -1;
    prompt_pages_ = pool_->allocate(prompt_len);
    KVDICE_CHECK(!prompt_pages_.empty(), "evict bench: the pool is sized for the prompt");
    prompt_.pages = prompt_pages_;
    prompt_.budget = budget.budget;
    prompt_.window = budget.window;
    prompt_.n_protected = rows_[0].n_protected;
    prompt_.ring_row = policy.needs().window_queries ? pool_->allocate_ring_row() : -1;
    prompt_tokens_ = random_prompt(mc.vocab, prompt_len, ctx.options.seed, 1);
    // A fresh pool hands pages and ring rows out as runs in order: the sequences' one block in sequence
    // order, the template's after it, which restore() copies as whole blocks.
    for (int s = 0; s < batch; ++s) {
      for (int j = 0; j < pages_per_seq; ++j)
        KVDICE_CHECK(pages_[static_cast<size_t>(s)][static_cast<size_t>(j)] ==
                         pages_[0][0] + int64_t{s} * pages_per_seq + j,
                     "evict bench: the pool hands out pages in order");
      KVDICE_CHECK(template_ring_row_ < 0 || rows_[static_cast<size_t>(s)].ring_row == rows_[0].ring_row + s,
                   "evict bench: the pool hands out ring rows in order");
    }
    for (int j = 0; j < pages_per_seq; ++j)
      KVDICE_CHECK(template_pages_[static_cast<size_t>(j)] == template_pages_[0] + j,
                   "evict bench: the pool hands out pages in order");
    const std::vector<std::vector<int32_t>>& pages = pages_;
    // Every slot holds its absolute position (slot i of a sequence = token i).
    shape_ = ctx.model.kv_shape();
    const kv::KvShape& shape = shape_;
    const int64_t n_pages = pool_->n_pages();
    positions_.assign(static_cast<size_t>(n_pages * shape.n_kv_heads * page_slots), 0);
    for (int s = 0; s < batch; ++s)
      for (size_t j = 0; j < pages[static_cast<size_t>(s)].size(); ++j)
        for (int h = 0; h < shape.n_kv_heads; ++h)
          for (int o = 0; o < page_slots; ++o)
            positions_[slot_index(s, h, static_cast<int>(j) * page_slots + o)] =
                static_cast<int32_t>(j * page_slots + o);
    const size_t kv_bytes = static_cast<size_t>(n_pages) * shape.n_kv_heads * page_slots * shape.head_dim *
                            dtype_size(pool_->dtype());
    const size_t slot_signal_bytes =
        static_cast<size_t>(n_pages) * shape.n_kv_heads * page_slots * sizeof(float);
    for (const backend::KvLayer& layer : pool_->layers()) {  // defined bytes everywhere before the fill
      backend_.fill_zero(layer.keys, kv_bytes);
      backend_.fill_zero(layer.values, kv_bytes);
      if (layer.value_range != nullptr) backend_.fill_zero(layer.value_range, slot_signal_bytes);
      if (layer.attention_mass != nullptr) backend_.fill_zero(layer.attention_mass, slot_signal_bytes);
      if (layer.query_ring != nullptr)
        backend_.fill_zero(
            layer.query_ring,
            static_cast<size_t>(kv::KvPool::query_ring_bytes(shape, pool_->query_ring()) / shape.n_layers));
    }
    fill_template(ctx, forward);
    check_template_positions();
    view_ = storage_->device(/*self_feeding=*/true);
    reset();
    check_fill();
  }

  // Every sequence back at `length` slots (T + r: due again), appended as many, each slot at its
  // own position again: a round compacts the kept slots' positions to the front, so without this the
  // next round would see positions twice, which a sequence never holds.
  void reset(int length = -1) {
    if (length < 0) length = len_;
    restore();
    for (const backend::KvLayer& layer : pool_->layers())
      backend_.upload(layer.positions, positions_.data(), positions_.size() * sizeof(int32_t));
    backend::StepBatch& b = storage_->host();
    for (int s = 0; s < batch_; ++s) {
      backend::SeqRow& row = rows_[static_cast<size_t>(s)];
      row.length = length;
      row.appended = length;
      row.round = 0;
      backend::write_row(b, s, s, row);
    }
    storage_->upload_all();
    backend_.synchronize();
  }

  // Mean time of one decode step (forward, sample, advance) of the whole batch at T + r/2 resident
  // slots, the middle of the cycle a bounded sequence runs through; the step appends one slot inside
  // the reservation. No round runs (every row is below its trigger). With `without_signals`, each
  // repeat also times the same step over views of the pool that leave out its signal arrays (query
  // ring, value ranges, attention mass), right after the one that records them, so both means see the
  // device in the same state and the difference is what recording the signals costs.
  // Timed as a recorded graph replay where the backend records graphs (as the engine runs it).
  // Checks after each variant's last timed step that it ran: every row one slot longer.
  struct StepTimes {
    double ms = 0.0, without_signals_ms = 0.0;
  };
  StepTimes decode_step_ms(model::ForwardPass& forward, int repeats, uint64_t graph_key, bool without_signals,
                           std::vector<std::string>& problems) {
    const int length = budget_.budget + budget_.window / 2 - 1;
    const std::vector<backend::KvLayer> plain = layers_without_signals();
    struct Variant {
      std::span<const backend::KvLayer> layers;
      uint64_t key;
      bool graph = false;
      double total_ms = 0.0;
    };
    std::vector<Variant> variants = {{pool_->layers(), graph_key}};
    if (without_signals) variants.push_back({plain, graph_key ^ kWithoutSignalsKey});
    auto step = [&](const Variant& v) {
      backend_.sample(view_, forward.run(view_, v.layers, false));
      backend_.advance(view_);
    };
    // Each eagerly once first: scratch grows outside any recording (a backend drops its recordings when
    // a scratch grows, so both are recorded after both have run).
    for (const Variant& v : variants) {
      reset(length);
      step(v);
    }
    for (Variant& v : variants) {
      reset(length);
      v.graph = backend_.begin_capture();
      if (v.graph) {
        step(v);
        backend_.end_capture(this, v.key);
      }
    }
    for (int i = 0; i < repeats; ++i) {
      for (Variant& v : variants) {
        const bool last = i + 1 == repeats;
        reset(length);
        const std::vector<unsigned char> before = last ? first_signals() : std::vector<unsigned char>{};
        const auto start = Clock::now();
        if (!v.graph || !backend_.replay(this, v.key)) step(v);
        backend_.synchronize();
        v.total_ms += 1e3 * std::chrono::duration<double>(Clock::now() - start).count();
        if (!last) continue;
        check_one_slot_longer(length, problems);
        // The step records the policy's signals, and the step without them records none.
        const bool records = &v == &variants.front();
        if (!before.empty() && (first_signals() != before) != records)
          problems.push_back(fmt::format("decode step {}: sequence 0's signals in layer 0 {}",
                                         records ? "with signals" : "without signals",
                                         records ? "were not recorded" : "changed"));
      }
    }
    reset();
    const double n = static_cast<double>(repeats);
    return {variants[0].total_ms / n, variants.back().total_ms / n};
  }

  // The pool's layers with their signal arrays left out: a step over them records no signal.
  std::vector<backend::KvLayer> layers_without_signals() const {
    std::vector<backend::KvLayer> plain = pool_->layers();
    for (backend::KvLayer& layer : plain) {
      layer.query_ring = nullptr;
      layer.value_range = nullptr;
      layer.attention_mass = nullptr;
    }
    return plain;
  }

  // Sequence 0's signals in the first layer, as bytes: its pages' attention mass and value ranges and
  // its ring row (empty for a pool that records none).
  std::vector<unsigned char> first_signals() { return signals(pages_[0], rows_[0].ring_row); }

  // f(bytes, size) for each region of the first layer holding a sequence's signals: its pages' attention
  // mass and value ranges, its ring row.
  template <class F>
  void for_each_signal_region(std::span<const int32_t> pages, int ring_row, F&& f) {
    const backend::KvLayer& layer = pool_->layers().front();
    const int64_t signal_page = signal_page_bytes();
    for (float* signal : {layer.attention_mass, layer.value_range})
      if (signal != nullptr)
        for (int32_t page : pages)
          f(reinterpret_cast<unsigned char*>(signal) + int64_t{page} * signal_page, signal_page);
    if (layer.query_ring != nullptr && ring_row >= 0) {
      const int64_t row_bytes =
          (layer.ring_index(1, 0, 0) - layer.ring_index(0, 0, 0)) * kv::KvPool::kQueryRingElementBytes;
      f(reinterpret_cast<unsigned char*>(layer.query_ring) +
            layer.ring_index(ring_row, 0, 0) * kv::KvPool::kQueryRingElementBytes,
        row_bytes);
    }
  }

  // A sequence's signals in the first layer, as bytes (empty for a pool that records none).
  std::vector<unsigned char> signals(std::span<const int32_t> pages, int ring_row) {
    std::vector<unsigned char> out;
    for_each_signal_region(pages, ring_row, [&](unsigned char* at, int64_t bytes) {
      const size_t end = out.size();
      out.resize(end + static_cast<size_t>(bytes));
      backend_.download(out.data() + end, at, static_cast<size_t>(bytes));
    });
    return out;
  }

  void zero_signals(std::span<const int32_t> pages, int ring_row) {
    for_each_signal_region(pages, ring_row, [&](unsigned char* at, int64_t bytes) {
      backend_.fill_zero(at, static_cast<size_t>(bytes));
    });
  }

  // The prompt's positions in the first layer: with `clear`, every one set to -1 (returns -1); else the
  // first slot of the prompt that does not hold its own position (-1: none), every KV head's.
  int prompt_positions(bool clear) {
    const backend::KvLayer& layer = pool_->layers().front();
    const int page_slots = pool_->page_slots(), n_kv = shape_.n_kv_heads;
    std::vector<int32_t> page(static_cast<size_t>(n_kv * page_slots), -1);
    const int n_tokens = static_cast<int>(prompt_tokens_.size());
    for (size_t j = 0; j < prompt_pages_.size(); ++j) {
      int32_t* at = layer.positions + int64_t{prompt_pages_[j]} * n_kv * page_slots;
      if (clear) {
        backend_.upload(at, page.data(), page.size() * sizeof(int32_t));
        continue;
      }
      backend_.download(page.data(), at, page.size() * sizeof(int32_t));
      for (int o = 0; o < page_slots; ++o) {
        const int slot = static_cast<int>(j) * page_slots + o;
        for (int h = 0; h < n_kv && slot < n_tokens; ++h)
          if (page[static_cast<size_t>(h * page_slots + o)] != slot) return slot;
      }
    }
    return -1;
  }

  // Mean time of the prompt's prefill: its tokens from an empty sequence, in steps of at most the
  // engine's prefill chunk, eager (as the engine runs prefill steps). With `without_signals`, each
  // repeat also times it over views of the pool that leave out the signal arrays, right after the one
  // that records them. Checks after each variant's last run, from zeroed signals, that the one records
  // the policy's signals and the other none.
  StepTimes prefill_ms(model::ForwardPass& forward, int repeats, bool without_signals,
                       std::vector<std::string>& problems) {
    const std::vector<backend::KvLayer> plain = layers_without_signals();
    std::vector<std::span<const backend::KvLayer>> variants = {pool_->layers()};
    if (without_signals) variants.emplace_back(plain);
    const int n_tokens = static_cast<int>(prompt_tokens_.size());
    backend::StepStorage storage(backend_, 1, std::min(n_tokens, kPromptChunk),
                                 static_cast<int>(prompt_.pages.size()));
    auto prefill = [&](std::span<const backend::KvLayer> layers) {
      for (int at = 0; at < n_tokens; at += kPromptChunk) {
        const int n = std::min(kPromptChunk, n_tokens - at);
        backend::StepBatch& b = storage.host();
        b.n_seqs = 1;
        b.n_rows = b.max_rows_per_seq = n;
        backend::SeqRow step = prompt_;
        step.tokens =
            std::span<const int32_t>(prompt_tokens_).subspan(static_cast<size_t>(at), static_cast<size_t>(n));
        step.length = step.appended = at;
        backend::write_row(b, 0, 0, step);
        storage.upload_all();
        forward.run(storage.device(), layers, /*all_positions=*/false);
      }
      backend_.synchronize();
    };
    for (const auto& layers : variants) prefill(layers);  // scratch grows outside the timed runs
    std::vector<double> total(variants.size(), 0.0);
    for (int i = 0; i < repeats; ++i) {
      for (size_t v = 0; v < variants.size(); ++v) {
        const bool last = i + 1 == repeats;
        if (last) {
          zero_signals(prompt_.pages, prompt_.ring_row);
          prompt_positions(/*clear=*/true);
        }
        const auto start = Clock::now();
        prefill(variants[v]);
        total[v] += 1e3 * std::chrono::duration<double>(Clock::now() - start).count();
        if (!last) continue;
        const int first_wrong = prompt_positions(/*clear=*/false);
        if (first_wrong >= 0)
          problems.push_back(
              fmt::format("prefill: the prompt's slot {} in layer 0 does not hold its position after "
                          "a prefill of {} tokens",
                          first_wrong, n_tokens));
        const std::vector<unsigned char> after = signals(prompt_.pages, prompt_.ring_row);
        const bool recorded = std::any_of(after.begin(), after.end(), [](unsigned char c) { return c != 0; });
        if (recorded != (v == 0 && !after.empty()))
          problems.push_back(fmt::format("prefill {}: the prompt's signals in layer 0 {}",
                                         v == 0 ? "with signals" : "without signals",
                                         v == 0 ? "were not recorded" : "were recorded"));
      }
    }
    const double n = static_cast<double>(repeats);
    return {total.front() / n, total.back() / n};
  }

  // After a step from `length` slots every sequence holds one more.
  void check_one_slot_longer(int length, std::vector<std::string>& problems) {
    std::vector<int32_t> lengths(static_cast<size_t>(batch_));
    backend_.download(lengths.data(), view_.length, lengths.size() * sizeof(int32_t));
    for (int s = 0; s < batch_; ++s) {
      if (lengths[static_cast<size_t>(s)] != length + 1) {
        problems.push_back(fmt::format("decode step: sequence {} holds {} slots after a step from {}", s,
                                       lengths[static_cast<size_t>(s)], length));
        return;
      }
    }
  }
  static constexpr uint64_t kWithoutSignalsKey = 1;  // the step without signals' graph: the key ^ 1

  // After a round every sequence must hold exactly T slots, each (layer, KV head) T distinct
  // positions (checked in the first and last layer), and have counted the round (reset() puts the
  // counter back at 0).
  void check(std::vector<std::string>& problems) {
    const int rounds_done = 1;
    std::vector<int32_t> length(static_cast<size_t>(batch_)), round(static_cast<size_t>(batch_));
    backend_.download(length.data(), view_.length, length.size() * sizeof(int32_t));
    backend_.download(round.data(), view_.round, round.size() * sizeof(int32_t));
    for (int s = 0; s < batch_; ++s) {
      if (length[static_cast<size_t>(s)] != budget_.budget || round[static_cast<size_t>(s)] != rounds_done) {
        problems.push_back(fmt::format(
            "sequence {}: {} slots and {} rounds after {} rounds, expected {} slots", s,
            length[static_cast<size_t>(s)], round[static_cast<size_t>(s)], rounds_done, budget_.budget));
        return;
      }
    }
    const std::vector<backend::KvLayer>& layers = pool_->layers();
    std::vector<int32_t> positions(positions_.size()), kept(static_cast<size_t>(budget_.budget));
    for (const backend::KvLayer* layer : {&layers.front(), &layers.back()}) {
      backend_.download(positions.data(), layer->positions, positions.size() * sizeof(int32_t));
      for (int s = 0; s < batch_; ++s)
        for (int h = 0; h < shape_.n_kv_heads; ++h) {
          for (int i = 0; i < budget_.budget; ++i)
            kept[static_cast<size_t>(i)] = positions[slot_index(s, h, i)];
          std::sort(kept.begin(), kept.end());
          if (std::adjacent_find(kept.begin(), kept.end()) != kept.end()) {
            problems.push_back(
                fmt::format("sequence {}, layer {}, KV head {}: a position kept twice after a "
                            "round",
                            s, layer - layers.data(), h));
            return;
          }
        }
    }
  }

  FilledPool(const FilledPool&) = delete;
  FilledPool& operator=(const FilledPool&) = delete;
  // The recorded rounds bake in this pool's buffers: they go with it.
  ~FilledPool() { backend_.drop_graphs(this); }

  RoundTiming time(const policy::EvictionPolicy& policy, const std::vector<backend::KvLayer>& layers,
                   int repeats, uint64_t graph_key) {
    RoundTiming t;
    t.problems = fill_problems_;
    // Eager once first: scratch grows and the layer table uploads outside any recording.
    backend_.evict(view_, layers, policy, 0);
    check(t.problems);
    reset();
    t.graph = backend_.begin_capture();
    if (t.graph) {
      backend_.evict(view_, layers, policy, 0);
      backend_.end_capture(this, graph_key);
    }
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      reset();
      const auto start = Clock::now();
      if (!t.graph || !backend_.replay(this, graph_key)) backend_.evict(view_, layers, policy, 0);
      backend_.synchronize();
      ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count());
    }
    check(t.problems);
    t.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
    t.min_ms = *std::min_element(ms.begin(), ms.end());
    return t;
  }

  const std::vector<backend::KvLayer>& layers() const { return pool_->layers(); }
  // Slots a row of the decode batch's page table covers (--max-context, at least T + r).
  int page_table_slots() const { return view_.max_pages * pool_->page_slots(); }

 private:
  // The template sequence's K/V and signals: a forward over T + r pseudo-random tokens in steps of
  // kFillRows rows, which records the signals the policy reads (its ring row takes the last r queries)
  // as a prefill does.
  void fill_template(const BenchContext& ctx, model::ForwardPass& forward) {
    const std::vector<int> tokens = random_prompt(ctx.model.config().vocab, len_, ctx.options.seed, 0);
    backend::SeqRow row;
    row.pages = template_pages_;
    row.budget = budget_.budget;
    row.window = budget_.window;
    row.ring_row = template_ring_row_;
    forward.prefill_in_chunks(*pool_, tokens, row, kFillRows);
  }

  // Every sequence's K/V, value ranges, attention mass and ring row as the template's.
  void restore() {
    const int64_t kv_page = kv_page_bytes(), signal_page = signal_page_bytes();
    const int64_t first_page = pages_[0][0], template_page = template_pages_[0];
    for (const backend::KvLayer& layer : pool_->layers()) {
      replicate(layer.keys, kv_page * pages_per_seq_, first_page * kv_page, template_page * kv_page);
      replicate(layer.values, kv_page * pages_per_seq_, first_page * kv_page, template_page * kv_page);
      if (layer.value_range != nullptr)
        replicate(layer.value_range, signal_page * pages_per_seq_, first_page * signal_page,
                  template_page * signal_page);
      if (layer.attention_mass != nullptr)
        replicate(layer.attention_mass, signal_page * pages_per_seq_, first_page * signal_page,
                  template_page * signal_page);
      if (layer.query_ring != nullptr && template_ring_row_ >= 0) {
        const int64_t row_bytes =
            (layer.ring_index(1, 0, 0) - layer.ring_index(0, 0, 0)) * kv::KvPool::kQueryRingElementBytes;
        replicate(layer.query_ring, row_bytes, rows_[0].ring_row * row_bytes, template_ring_row_ * row_bytes);
      }
    }
  }

  // Bytes of one page of one layer's keys (or values): the unit restore() copies and check_fill() reads.
  int64_t kv_page_bytes() const {
    return int64_t{shape_.n_kv_heads} * pool_->page_slots() * shape_.head_dim *
           static_cast<int64_t>(dtype_size(pool_->dtype()));
  }
  // Bytes of one page of one layer's per-slot fp32 signal (attention mass, value ranges).
  int64_t signal_page_bytes() const {
    return int64_t{shape_.n_kv_heads} * pool_->page_slots() * static_cast<int64_t>(sizeof(float));
  }

  // The template's `seq_bytes` at byte `from` of `base` into every sequence's, which lie one after
  // another from byte `first`: into the first sequence, then the copied block doubles (1 + log2(batch)
  // copies).
  void replicate(void* base, int64_t seq_bytes, int64_t first, int64_t from) {
    char* bytes = static_cast<char*>(base);
    char* block = bytes + first;
    backend_.copy(block, bytes + from, static_cast<size_t>(seq_bytes));
    for (int64_t done = 1; done < batch_; done *= 2)
      backend_.copy(block + done * seq_bytes, block,
                    static_cast<size_t>(std::min<int64_t>(done, batch_ - done) * seq_bytes));
  }

  // After the template's prefill: its slot i of every KV head holds token i's position in the first and
  // the last layer (a prefill that appended its chunks anywhere else would leave other keys to time).
  // The template's pages are consecutive (the constructor checks), so its positions are one block.
  void check_template_positions() {
    const int page_slots = pool_->page_slots();
    const int n_kv = shape_.n_kv_heads;
    std::vector<int32_t> block(template_pages_.size() * static_cast<size_t>(n_kv * page_slots));
    for (const backend::KvLayer* layer : {&pool_->layers().front(), &pool_->layers().back()}) {
      backend_.download(block.data(), layer->positions + int64_t{template_pages_[0]} * n_kv * page_slots,
                        block.size() * sizeof(int32_t));
      for (int slot = 0; slot < len_; ++slot)
        for (int h = 0; h < n_kv; ++h) {
          const int32_t held = block[static_cast<size_t>(((slot / page_slots) * n_kv + h) * page_slots +
                                                         slot % page_slots)];
          if (held != slot) {
            fill_problems_.push_back(
                fmt::format("pool fill: the template's slot {} of KV head {} in layer {} holds position {}", slot,
                            h, layer->layer, held));
            return;
          }
        }
    }
  }

  // After the first restore: the template's keys are not all zero (the prefill wrote them), and every
  // sequence holds them, in the first and the last layer, and the template's ring row (first layer).
  void check_fill() {
    const auto page_bytes = static_cast<size_t>(kv_page_bytes());
    auto sequence_keys = [&](const backend::KvLayer& layer, const std::vector<int32_t>& pages) {
      std::vector<unsigned char> bytes(page_bytes * pages.size());
      for (size_t j = 0; j < pages.size(); ++j)
        backend_.download(bytes.data() + j * page_bytes,
                          static_cast<const unsigned char*>(layer.keys) + int64_t{pages[j]} * page_bytes,
                          page_bytes);
      return bytes;
    };
    const std::vector<backend::KvLayer>& layers = pool_->layers();
    for (const backend::KvLayer* layer : {&layers.front(), &layers.back()}) {
      const std::vector<unsigned char> want = sequence_keys(*layer, template_pages_);
      if (std::all_of(want.begin(), want.end(), [](unsigned char b) { return b == 0; })) {
        fill_problems_.push_back(
            fmt::format("pool fill: the template's keys are all zero in layer {}", layer->layer));
        return;
      }
      for (int s = 0; s < batch_; ++s)
        if (sequence_keys(*layer, pages_[static_cast<size_t>(s)]) != want) {
          fill_problems_.push_back(fmt::format(
              "pool fill: sequence {} does not hold the template's keys in layer {}", s, layer->layer));
          return;
        }
    }
    const backend::KvLayer& first = layers.front();
    if (first.query_ring == nullptr || template_ring_row_ < 0) return;
    const size_t row_elements = static_cast<size_t>(first.ring_index(1, 0, 0) - first.ring_index(0, 0, 0));
    auto ring_row = [&](int row) {
      std::vector<uint16_t> out(row_elements);
      backend_.download(out.data(), first.query_ring + first.ring_index(row, 0, 0),
                        row_elements * sizeof(uint16_t));
      return out;
    };
    const std::vector<uint16_t> want = ring_row(template_ring_row_);
    for (int s = 0; s < batch_; ++s)
      if (ring_row(rows_[static_cast<size_t>(s)].ring_row) != want) {
        fill_problems_.push_back(
            fmt::format("pool fill: sequence {} does not hold the template's ring row", s));
        return;
      }
  }

  // Index of sequence s's slot `slot` of KV head h in a layer's positions.
  size_t slot_index(int s, int h, int slot) const {
    const int page_slots = pool_->page_slots();
    const int64_t page = pages_[static_cast<size_t>(s)][static_cast<size_t>(slot / page_slots)];
    return static_cast<size_t>((page * shape_.n_kv_heads + h) * page_slots + slot % page_slots);
  }

  backend::Backend& backend_;
  int batch_;
  kv::BudgetSpec budget_;
  int len_ = 0;
  int pages_per_seq_ = 0;
  std::unique_ptr<kv::KvPool> pool_;
  std::unique_ptr<backend::StepStorage> storage_;
  backend::StepBatch view_;
  static constexpr int32_t kToken[1] = {0};  // every row's input token
  std::vector<std::vector<int32_t>> pages_;  // each sequence's pages
  std::vector<int32_t> template_pages_;      // the template's (fill_template), copied by restore()
  int template_ring_row_ = -1;
  std::vector<std::string> fill_problems_;  // check_fill's, reported with every timing
  kv::KvShape shape_;
  std::vector<int32_t> positions_;     // every layer's positions as filled (slot i of a sequence = token i)
  std::vector<backend::SeqRow> rows_;  // each sequence's row (reset() rewrites length and round)
  backend::SeqRow prompt_;             // the timed prompt's sequence (prefill_ms), beside the batch
  std::vector<int32_t> prompt_pages_, prompt_tokens_;
};

}  // namespace

std::vector<std::string> default_evict_policies(const backend::Backend& backend) {
  std::vector<std::string> out;
  for (const std::string& name : policy::policy_names()) {
    if (!backend.is_cpu() && policy::cuda_selection(name) == nullptr) continue;
    // A policy that cannot run without options (triattention: stats=FILE) is timed only when named
    // in --policies with them.
    std::unique_ptr<policy::EvictionPolicy> policy;
    try {
      policy = policy::make_policy(name);
    } catch (const Error&) {
      continue;
    }
    if (!policy->evicts()) continue;
    out.push_back(name);
  }
  return out;
}

std::vector<std::string> check_evict_options(const BenchOptions& o, const backend::Backend& backend) {
  const std::vector<std::string> policies = o.policies.empty() ? default_evict_policies(backend) : o.policies;
  if (policies.empty()) fail("evict: no policy to time");
  for (const std::string& name : policies) {
    const std::unique_ptr<policy::EvictionPolicy> policy = policy::make_policy(name, "--policies");
    if (!policy->evicts()) fail("evict: policy '{}' never evicts; there is no round to time", name);
    backend.check_policy(*policy);  // names the policy when this backend has no selection for it
    const LoadSpec spec = load_spec(o, name);  // validates the budget and the prompt against it
    const int resident = spec.budget.engine.budget + spec.budget.engine.window;
    if (o.max_context > 0 && o.max_context < resident)
      fail("--max-context {} is shorter than the T + r = {} slots a sequence of '{}' holds at its round",
           o.max_context, resident, name);
  }
  for (const int batch : o.batches)
    if (batch < 1 || batch > 4096) fail("--batches: {} is outside [1, 4096]", batch);
  return policies;
}

Json run_evict(const BenchContext& ctx) {
  const BenchOptions& o = ctx.options;
  const std::vector<std::string> policies = check_evict_options(o, ctx.backend);
  const int repeats = std::max(o.repeats, 1);
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  // The weights once, for the pools' template prefills and the decode steps that give each round its
  // share.
  model::ForwardPass forward(ctx.model, ctx.backend,
                             std::max({max_batch, kFillRows, std::min(o.prompt_len, kPromptChunk)}),
                             max_batch, max_batch);
  Json out;
  out["results"] = Json::array();
  for (size_t bi = 0; bi < o.batches.size(); ++bi) {
    const int batch = o.batches[bi];
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      const std::string& name = policies[pi];
      const auto policy = policy::make_policy(name);
      const LoadSpec spec = load_spec(o, name);
      const uint64_t key_base = (uint64_t{1} << 63) | (uint64_t{bi} << 40) | (uint64_t{pi} << 20);
      // A policy that records signals makes every decode step dearer (H2O's attention mass after each
      // layer's attention, the query ring, value ranges): the same step over the same pool without
      // them, timed in turn with it, says by how much.
      const policy::SignalNeeds needs = policy->needs();
      const bool records = needs.any();
      std::vector<std::string> step_problems;
      FilledPool pool(ctx, forward, *policy, batch, spec.budget.engine, o.prompt_len);
      const bool whole_round = policy->scores_whole_round();
      const std::vector<backend::KvLayer> one_layer{pool.layers().front()};
      const RoundTiming model = pool.time(*policy, pool.layers(), repeats, key_base | 1);
      const double n_layers = static_cast<double>(pool.layers().size());
      const RoundTiming layer = whole_round ? RoundTiming{.mean_ms = model.mean_ms / n_layers,
                                                          .min_ms = model.min_ms / n_layers,
                                                          .graph = model.graph,
                                                          .problems = {}}
                                            : pool.time(*policy, one_layer, repeats, key_base);
      const auto steps = pool.decode_step_ms(forward, std::min(repeats, 10), key_base | 2, records, step_problems);
      const double step_ms = steps.ms, step_without_signals = steps.without_signals_ms;
      const auto prefill = pool.prefill_ms(forward, std::min(repeats, 10), records, step_problems);
      const double r = o.window;
      Validation validation;
      validation.sequences = batch;
      validation.rounds_expected = int64_t{batch} * (whole_round ? 1 + repeats : 2 + 2 * repeats);
      validation.problems = layer.problems;
      validation.problems.insert(validation.problems.end(), model.problems.begin(), model.problems.end());
      validation.rounds_reported = validation.problems.empty() ? validation.rounds_expected : -1;
      validation.problems.insert(validation.problems.end(), step_problems.begin(), step_problems.end());
      Json metrics{
          {"batch", batch},
          {"policy", name},
          {"round_ms_layer", layer.mean_ms},
          {"round_ms_layer_min", layer.min_ms},
          {"round_ms_model", model.mean_ms},
          {"round_ms_model_min", model.min_ms},
          {"layers", static_cast<int>(pool.layers().size())},
          {"round_ms_layer_from", whole_round ? "whole-model round / layers (the policy scores every "
                                                "layer at once)"
                                              : "one-layer evict call"},
          {"timed_as", model.graph ? "graph replay" : "eager op"},
          {"decode_step_ms", step_ms},
          {"decode_share", model.mean_ms / (r * step_ms + model.mean_ms)},
          {"signals", signal_names(needs)},
          {"decode_step_ms_without_signals", step_without_signals},
          {"decode_share_with_signals",
           (model.mean_ms + r * (step_ms - step_without_signals)) / (r * step_ms + model.mean_ms)},
          {"page_table_slots", pool.page_table_slots()},
          {"prefill_tokens", o.prompt_len},
          {"prefill_ms", prefill.ms},
          {"prefill_ms_without_signals", prefill.without_signals_ms}};
      out["results"].push_back(Json{{"label", fmt::format("{} batch {}", name, batch)},
                                    {"metrics", metrics},
                                    {"validation", validation.to_json()}});
    }
  }
  out["parameters"] = Json{
      {"budget", o.budget},
      {"window", o.window},
      {"budget_convention", o.convention},
      {"prompt_len", o.prompt_len},
      {"max_context", o.max_context},
      {"batches", o.batches},
      {"policies", policies},
      {"repeats", repeats},
      {"pool_fill",
       "one sequence prefilled with T + r pseudo-random tokens (seed), its K/V, value ranges, attention "
       "mass and ring row copied into every sequence before each timed round and step"},
      {"step_time_from",
       "decode steps (forward, sample, advance) over the filled pool at T + r/2 resident slots, same "
       "batch, the policy's signals recorded"},
      {"prefill_time_from",
       fmt::format(
           "the prompt (prompt_len pseudo-random tokens) prefilled into an empty sequence beside the pool "
           "in steps of at most {} rows (the engine's prefill chunk), eager, the policy's signals "
           "recorded; without them in turn for a policy that records some",
           kPromptChunk)},
      {"decode_share_rule", "round_model / (r * step + round_model)"},
      {"decode_share_with_signals_rule",
       "(round_model + r * (step - step_without_signals)) / (r * step + round_model): the round and the "
       "signals' extra step time; the step without signals is the same pool's with its signal arrays left "
       "out, "
       "timed in turn with the step that records them"}};
  return out;
}

}  // namespace kvdice::bench
