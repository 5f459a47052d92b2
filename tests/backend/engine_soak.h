// The engine soak: drives an Engine the way `kvdice serve` does (one step at a time, requests
// submitted and cancelled between steps) under a server's admission pattern, and checks every
// response. Requests arrive staggered (Poisson, in engine steps), so sequences join and retire
// mid-batch, long prompts prefill in chunks between decode steps, the batch grows and shrinks (on
// CUDA: scratch grows and recorded graphs are dropped and recorded again), each request brings its
// own policy and budget, some are cancelled while waiting or mid-stream, some stop on a stop id.
// Checks: one result per request; its token count and finish reason agree with what was asked and
// what was streamed; its eviction rounds and resident slots follow the budget's trigger rule; and a
// sample of requests decodes the same tokens alone. Used by tests/engine_soak (the CPU variant in CI,
// the CUDA variants at the Qwen3-4B shape by tools/gpu/run-soak.sh).
#pragma once

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvdice::test {

struct SoakPolicy {
  std::string spec;  // policy name (with options)
  int budget = 0;    // T; 0 for policies that keep everything
  int window = 64;   // r
};

struct SoakConfig {
  int requests = 64;
  double mean_gap_steps = 0.5;  // mean engine steps between arrivals (exponential gaps)
  int min_prompt = 4, max_prompt = 40;
  int long_prompt = 0;                 // every 7th request under `full` has a prompt this long (chunked)
  int min_new = 4, max_new = 60;
  double stop_fraction = 0.25;          // requests that may stop on a stop id
  double cancel_waiting_fraction = 0.05;  // cancelled right after submission, before any token
  double cancel_stream_fraction = 0.1;    // cancelled after a few streamed tokens
  std::vector<SoakPolicy> policies;     // requests cycle through these
  int verify_alone = 3;                 // requests re-run alone and compared token for token
  uint64_t seed = 1;
  int vocab = 0;
};

struct SoakReport {
  int finished_length = 0, finished_stop = 0, cancelled = 0;
  int64_t steps = 0, decode_steps = 0, generated = 0, rounds = 0;
  int peak_running = 0;
  int64_t graphs_dropped = 0;
  std::vector<std::string> failures;
  std::vector<std::vector<int>> tokens;  // per request, in arrival order

  std::string summary() const {
    return fmt::format(
        "{} length, {} stop, {} cancelled; {} steps ({} decode), {} tokens, {} eviction rounds, peak batch {}, "
        "{} graphs dropped; {} failures",
        finished_length, finished_stop, cancelled, steps, decode_steps, generated, rounds, peak_running,
        graphs_dropped, failures.size());
  }
};

namespace soak_detail {

struct Planned {
  double arrival = 0;  // in engine steps
  engine::GenerationRequest request;
  int cancel_after = -1;  // tokens streamed before the client goes; 0 = while waiting; -1 = never
  uint64_t id = 0;
  bool submitted = false, cancel_sent = false;
  std::vector<int> streamed;
  bool stream_finished = false;
};

// What the budget's trigger rule says the engine's mirror must show after `generated` tokens: the
// first comes from the prefill, each later one from a decode step that appends one slot and runs a
// round when the length hits the trigger.
inline void expected_rounds(const kv::BudgetSpec& b, int prompt, int generated, int& rounds, int& final_len,
                            int& peak) {
  int len = prompt;
  rounds = 0;
  peak = len;
  for (int g = 1; g < generated; ++g) {
    ++len;
    peak = std::max(peak, len);
    if (b.should_evict(len)) {
      len = b.budget;
      ++rounds;
    }
  }
  final_len = len;
}

}  // namespace soak_detail

// Runs the soak on `engine` (fresh, idle). `make_engine` builds a fresh engine of the same
// configuration for the decode-alone comparisons.
template <class MakeEngine>
SoakReport run_engine_soak(engine::Engine& engine, backend::Backend& backend, const SoakConfig& config,
                           MakeEngine&& make_engine) {
  using soak_detail::Planned;
  SoakReport report;
  std::mt19937_64 rng(config.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  std::exponential_distribution<double> gap(1.0 / config.mean_gap_steps);

  // A stop set of 1/16 of the vocabulary: a random-weight model hits it every 16 tokens or so.
  std::vector<int> stop_ids;
  for (int t = 0; t < config.vocab; t += 16) stop_ids.push_back(std::min(config.vocab - 1, t + uniform(0, 15)));

  std::vector<Planned> plan(static_cast<size_t>(config.requests));
  double t = 0;
  for (int i = 0; i < config.requests; ++i) {
    Planned& p = plan[static_cast<size_t>(i)];
    t += gap(rng);
    p.arrival = t;
    const SoakPolicy& pol = config.policies[static_cast<size_t>(i) % config.policies.size()];
    engine::GenerationRequest& r = p.request;
    const bool long_one = config.long_prompt > 0 && pol.budget == 0 && i % 7 == 0;
    const int prompt = long_one ? config.long_prompt : uniform(config.min_prompt, config.max_prompt);
    for (int k = 0; k < prompt; ++k) r.prompt.push_back(uniform(0, config.vocab - 1));
    r.max_new_tokens = uniform(config.min_new, config.max_new);
    r.sampling = {0.6f, 0.95f, 0, static_cast<uint64_t>(1000 + i)};
    r.stream_id = static_cast<uint64_t>(i);
    if (chance(config.stop_fraction)) r.stop_ids = stop_ids;
    else r.ignore_eos = true;
    r.kv = engine::KvSettings{pol.spec, kv::BudgetSpec{pol.budget, pol.window}};
    if (chance(config.cancel_waiting_fraction)) p.cancel_after = 0;
    else if (chance(config.cancel_stream_fraction)) p.cancel_after = uniform(1, std::max(1, r.max_new_tokens - 1));
  }

  std::map<uint64_t, size_t> by_id;
  std::map<uint64_t, engine::GenerationResult> results;
  auto fail = [&](std::string what) { report.failures.push_back(std::move(what)); };
  engine.set_token_callback([&](const engine::TokenEvent& ev) {
    const auto it = by_id.find(ev.id);
    if (it == by_id.end()) return fail(fmt::format("token for unknown id {}", ev.id));
    Planned& p = plan[it->second];
    if (p.stream_finished) fail(fmt::format("request {}: token after its last", it->second));
    p.streamed.push_back(ev.token);
    p.stream_finished = ev.finished;
  });

  size_t next = 0;
  for (int64_t step = 0; next < plan.size() || !engine.idle(); ++step) {
    // Arrivals up to now; an idle engine skips ahead to the next one (a server waits).
    if (engine.idle() && next < plan.size()) t = std::max(static_cast<double>(step), plan[next].arrival);
    else t = static_cast<double>(step);
    for (; next < plan.size() && plan[next].arrival <= t; ++next) {
      Planned& p = plan[next];
      p.id = engine.submit(p.request);
      p.submitted = true;
      by_id[p.id] = next;
    }
    // Clients that go away: while waiting (before any token) or after some streamed tokens.
    for (size_t i = 0; i < next; ++i) {
      Planned& p = plan[i];
      if (p.cancel_sent || p.cancel_after < 0 || p.stream_finished) continue;
      if (static_cast<int>(p.streamed.size()) >= p.cancel_after) {
        engine.cancel(p.id);
        p.cancel_sent = true;
      }
    }
    engine.step();
    ++report.steps;
    report.peak_running = std::max(report.peak_running, engine.running());
    for (auto& r : engine.take_finished()) {
      if (results.count(r.id)) fail(fmt::format("id {}: two results", r.id));
      results[r.id] = std::move(r);
    }
    if (report.steps > 1000000) {
      fail("the soak did not finish within a million steps");
      break;
    }
  }
  engine.set_token_callback({});
  report.decode_steps = engine.decode_steps();
  report.graphs_dropped = backend.graphs_dropped();

  report.tokens.resize(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    const auto it = results.find(p.id);
    if (!p.submitted || it == results.end()) {
      fail(fmt::format("request {}: no result", i));
      continue;
    }
    const engine::GenerationResult& r = it->second;
    const int n = static_cast<int>(r.tokens.size());
    const int max_new = p.request.max_new_tokens;
    auto bad = [&](const std::string& what) {
      fail(fmt::format("request {} ({} prompt, max {}, {}): {}", i, p.request.prompt.size(), max_new,
                       engine::finish_reason_name(r.finish), what));
    };
    report.generated += n;
    report.tokens[i] = r.tokens;
    report.rounds += r.stats.eviction_rounds;
    if (r.tokens != p.streamed)
      bad(fmt::format("{} tokens in the result, {} streamed", n, p.streamed.size()));
    if (r.stats.generated_tokens != n && r.finish != engine::FinishReason::Cancelled)
      bad(fmt::format("stats count {} tokens, the result holds {}", r.stats.generated_tokens, n));
    const auto is_stop = [&](int tok) {
      return std::find(p.request.stop_ids.begin(), p.request.stop_ids.end(), tok) != p.request.stop_ids.end();
    };
    const int first_stop = static_cast<int>(std::find_if(r.tokens.begin(), r.tokens.end(), is_stop) - r.tokens.begin());
    switch (r.finish) {
      case engine::FinishReason::Length:
        ++report.finished_length;
        if (n != max_new) bad(fmt::format("finished by length with {} tokens", n));
        if (first_stop < n) bad(fmt::format("ran past the stop id at token {}", first_stop));
        break;
      case engine::FinishReason::Stop:
        ++report.finished_stop;
        if (p.request.ignore_eos || n == 0 || first_stop != n - 1 || n > max_new)
          bad(fmt::format("stopped with {} tokens, first stop id at {}", n, first_stop));
        break;
      case engine::FinishReason::Cancelled:
        ++report.cancelled;
        if (!p.cancel_sent) bad("cancelled without a cancellation");
        if (n > max_new || first_stop < n - 1) bad(fmt::format("cancelled with {} tokens", n));
        break;
      case engine::FinishReason::Running:
        bad("finished as running");
        break;
    }
    if (p.cancel_sent && r.finish != engine::FinishReason::Cancelled && n < p.cancel_after)
      bad(fmt::format("cancelled after {} tokens yet finished with {}", p.cancel_after, n));
    if (n > 0 && r.finish != engine::FinishReason::Cancelled) {
      int rounds = 0, final_len = 0, peak = 0;
      const kv::BudgetSpec b = p.request.kv->budget;
      soak_detail::expected_rounds(b, static_cast<int>(p.request.prompt.size()), n, rounds, final_len, peak);
      if (r.stats.eviction_rounds != rounds || r.stats.final_resident_slots != final_len ||
          r.stats.peak_resident_slots != peak)
        bad(fmt::format("{} rounds, {} resident at the end, {} at the peak; the trigger rule says {}, {}, {}",
                        r.stats.eviction_rounds, r.stats.final_resident_slots, r.stats.peak_resident_slots,
                        rounds, final_len, peak));
      if (peak > r.stats.reserved_slots)
        bad(fmt::format("{} slots resident, {} reserved", peak, r.stats.reserved_slots));
    }
  }
  if (engine.reserved_slots() != 0) fail(fmt::format("{} KV slots still reserved at the end", engine.reserved_slots()));

  // A sample of the finished requests, spread over the run, decodes the same tokens alone (no other sequence, no graph
  // recorded at another batch size).
  int compared = 0;
  const size_t stride = std::max<size_t>(1, plan.size() / std::max(1, config.verify_alone));
  for (size_t i = 0; i < plan.size() && compared < config.verify_alone; i += stride) {
    const Planned& p = plan[i];
    const engine::GenerationResult& r = results[p.id];
    if (r.finish == engine::FinishReason::Cancelled || r.tokens.empty()) continue;
    ++compared;
    auto alone = make_engine();
    alone->submit(p.request);
    alone->run();
    const auto out = alone->take_finished();
    if (out.size() != 1 || out[0].tokens != r.tokens)
      fail(fmt::format("request {}: decodes {} tokens alone, {} in the soak, or different ones", i,
                       out.empty() ? 0 : out[0].tokens.size(), r.tokens.size()));
  }
  return report;
}

}  // namespace kvdice::test
