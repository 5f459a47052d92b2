#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace kvdice::server {

using namespace prometheus;

struct Metrics::Handles {
  Family<Counter>* requests;
  Counter* prompt_tokens;
  Counter* generated_tokens;
  Counter* eviction_rounds;
  Counter* cancelled;
  Gauge* queue;
  Gauge* running;
  Gauge* policies_held;
  Gauge* kv_reserved;
  Gauge* kv_resident;
  Gauge* kv_capacity;
  Histogram* first_token;
  Histogram* token_interval;
  Histogram* step;
};

Metrics::Metrics(int64_t kv_slot_capacity)
    : registry_(std::make_shared<Registry>()), h_(std::make_unique<Handles>()) {
  Registry& r = *registry_;
  h_->requests =
      &BuildCounter().Name("kvdice_requests_total").Help("HTTP requests by route and status").Register(r);
  h_->prompt_tokens =
      &BuildCounter().Name("kvdice_prompt_tokens_total").Help("Prompt tokens prefilled").Register(r).Add({});
  h_->generated_tokens =
      &BuildCounter().Name("kvdice_generated_tokens_total").Help("Tokens generated").Register(r).Add({});
  h_->eviction_rounds = &BuildCounter()
                             .Name("kvdice_eviction_rounds_total")
                             .Help("Eviction rounds run by finished sequences")
                             .Register(r)
                             .Add({});
  h_->cancelled = &BuildCounter()
                       .Name("kvdice_cancelled_sequences_total")
                       .Help("Sequences stopped early: client gone, stop string, drain timeout")
                       .Register(r)
                       .Add({});
  h_->queue = &BuildGauge()
                   .Name("kvdice_queue_depth")
                   .Help("Requests waiting for KV reservation")
                   .Register(r)
                   .Add({});
  h_->running =
      &BuildGauge().Name("kvdice_running_sequences").Help("Sequences in the engine").Register(r).Add({});
  h_->policies_held = &BuildGauge()
                           .Name("kvdice_kv_policies_held")
                           .Help("Places of the engine's policy table (distinct KV policies, at most 64) held "
                                 "by waiting or running requests, the default's included")
                           .Register(r)
                           .Add({});
  auto& kv =
      BuildGauge().Name("kvdice_kv_slots").Help("KV slots (per layer and KV head) in the pool").Register(r);
  h_->kv_reserved = &kv.Add({{"state", "reserved"}});
  h_->kv_resident = &kv.Add({{"state", "resident"}});
  h_->kv_capacity = &kv.Add({{"state", "capacity"}});
  h_->kv_capacity->Set(static_cast<double>(kv_slot_capacity));
  const Histogram::BucketBoundaries latency = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
                                               0.2,   0.5,   1.0,   2.0,  5.0,  10.0};
  h_->first_token = &BuildHistogram()
                         .Name("kvdice_time_to_first_token_seconds")
                         .Help("From admission request to the first generated token")
                         .Register(r)
                         .Add({}, latency);
  h_->token_interval = &BuildHistogram()
                            .Name("kvdice_time_per_output_token_seconds")
                            .Help("Interval between two tokens of one sequence")
                            .Register(r)
                            .Add({}, latency);
  h_->step = &BuildHistogram()
                  .Name("kvdice_step_seconds")
                  .Help("Engine step time (prefill or one decode step for the whole batch)")
                  .Register(r)
                  .Add({}, latency);
}

Metrics::~Metrics() = default;

void Metrics::request_finished(const std::string& route, int status) {
  h_->requests->Add({{"route", route}, {"status", std::to_string(status)}}).Increment();
}
void Metrics::add_prompt_tokens(int64_t n) { h_->prompt_tokens->Increment(static_cast<double>(n)); }
void Metrics::add_generated_tokens(int64_t n) { h_->generated_tokens->Increment(static_cast<double>(n)); }
void Metrics::add_eviction_rounds(int64_t n) { h_->eviction_rounds->Increment(static_cast<double>(n)); }
void Metrics::add_cancelled(int64_t n) { h_->cancelled->Increment(static_cast<double>(n)); }
void Metrics::set_queue(int64_t n) { h_->queue->Set(static_cast<double>(n)); }
void Metrics::set_running(int64_t n) { h_->running->Set(static_cast<double>(n)); }
void Metrics::set_policies_held(int64_t n) { h_->policies_held->Set(static_cast<double>(n)); }
void Metrics::set_kv_capacity(int64_t slots) { h_->kv_capacity->Set(static_cast<double>(slots)); }

void Metrics::set_kv(int64_t reserved, int64_t resident) {
  h_->kv_reserved->Set(static_cast<double>(reserved));
  h_->kv_resident->Set(static_cast<double>(resident));
}
void Metrics::observe_first_token(double s) { h_->first_token->Observe(s); }
void Metrics::observe_token_interval(double s) { h_->token_interval->Observe(s); }
void Metrics::observe_engine_call(double s) { h_->step->Observe(s); }

std::string Metrics::render() const { return TextSerializer().Serialize(registry_->Collect()); }

}  // namespace kvdice::server
