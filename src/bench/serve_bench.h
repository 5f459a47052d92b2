// kvdice bench serve: the online serving benchmark (the load vLLM's benchmark_serving sends). A pool of
// client threads sends requests to an OpenAI-compatible /v1/completions endpoint with open-loop
// Poisson arrivals, streaming (server-sent events), and measures per request the time to first token,
// each inter-token gap, the end-to-end latency, the output tokens and the errors by kind. The server
// is `kvdice serve` started in this process on a free loopback port (the model and engine flags of the
// other protocols), or any server given by URL. docs/server.md defines every metric.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "core/json.h"

namespace kvdice::bench {

struct ServeBenchOptions {
  std::string url;           // http://host:port of a running server; empty: start kvdice serve here
  std::string api_key;       // sent as "Authorization: Bearer KEY" (and required by the in-process server)
  std::string served_model;  // the request's "model"; empty: "default" in process, omitted with --url
  int num_requests = 1000;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at time 0
  int max_concurrency = 0;  // requests in flight at most (0: no cap)
  double range_ratio = 0.0;  // lengths uniform in [len (1 - ratio), len (1 + ratio)]
  int prompt_vocab = 0;      // prompt ids uniform in [0, vocab); 0: the model's (in process), 1000 (URL)
  double timeout_s = 600.0;  // per request, connect to the last byte
  double max_duration_s = 0.0;  // the load's limit from its first send (0: none): no send after it, and
                                // requests still running are cut; the record keeps what finished
  bool save_detailed = false;  // every request's record in the run ("requests")
  // The in-process server (ignored with --url).
  int max_batch = 0;  // 0: kvdice serve's default for the backend
  int max_queue = 0;  // 0: --num-requests (no 429 from the bench's own load)
};

// One request as the client saw it. Times in seconds from the run's start (the first send).
struct RequestRecord {
  int index = 0;
  int prompt_len = 0;
  int output_len = 0;       // asked for (max_tokens)
  double scheduled = 0.0;   // Poisson arrival time
  double sent = 0.0;        // connect started
  bool ok = false;
  std::string error;        // kind: connect_refused, reset, timeout, http_429, truncated_stream, ...
  std::string error_detail;
  double ttft = 0.0;        // sent -> first chunk carrying text
  double e2e = 0.0;         // sent -> end of stream
  std::vector<double> itl;  // gaps between successive text-carrying chunks
  int chunks = 0;           // text-carrying chunks
  int64_t output_tokens = 0;
  bool tokens_from_usage = false;  // usage.completion_tokens (else: counted chunks)
  int64_t prompt_tokens = 0;       // usage.prompt_tokens (else the prompt sent)
};

// The arrival times of `n` requests at `rate` per second (exponential gaps, seeded; inf: all 0).
std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed);
// Percentile `p` (0..100) of `values` with linear interpolation between closest ranks (numpy's default,
// which vLLM's report uses); 0 for an empty list.
double percentile(std::vector<double> values, double p);

// Summary metrics of finished requests over `duration` seconds (vLLM's definitions; docs/server.md).
Json serve_metrics(const std::vector<RequestRecord>& records, double duration);
// The validation: every request done, none failed, each with exactly the tokens it asked for.
Json serve_validation(const std::vector<RequestRecord>& records);

// Runs the benchmark and returns one run record in the format of run_bench (report.h).
Json run_serve_bench(const BenchOptions& options, const ServeBenchOptions& serve);

}  // namespace kvdice::bench
