// Server metrics in the Prometheus text format (GET /metrics), kept with prometheus-cpp's core
// library: requests by route and status, tokens, queue depth, running sequences, KV slots reserved
// and resident, policy-table places held, eviction rounds, time to first token and time per output token.
#pragma once

#include <memory>
#include <string>

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace kvdice::server {

class Metrics {
 public:
  explicit Metrics(int64_t kv_slot_capacity);
  ~Metrics();

  void request_finished(const std::string& route, int status);
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n);
  void add_eviction_rounds(int64_t n);
  void add_cancelled(int64_t n);
  void set_queue(int64_t waiting_requests);
  void set_running(int64_t sequences);
  void set_kv(int64_t reserved_slots, int64_t resident_slots);
  void set_kv_capacity(int64_t slots);
  void set_policies_held(int64_t places);  // places of the engine's policy table held now
  void observe_first_token(double seconds);
  void observe_token_interval(double seconds);
  void observe_engine_call(double seconds);  // one engine callback interval (a decode step, roughly)

  std::string render() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  struct Handles;
  std::unique_ptr<Handles> h_;
};

}  // namespace kvdice::server
