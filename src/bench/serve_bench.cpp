#include "bench/serve_bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "bench/bench_model.h"
#include "bench/report.h"
#include "core/error.h"
#include "engine/model_bundle.h"
#include "kv/pool_sizing.h"
#include "policy/eviction_policy.h"
#include "server/server.h"

namespace kvdice::bench {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Client threads at most: beyond this an uncapped load queues in the client (recorded).
constexpr int kMaxClientThreads = 4096;

struct Target {
  std::string host;
  std::string port;
  std::string base;  // http://host:port
};

Target parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    fail("--url {}: expected http://HOST:PORT (https is not supported; put a TLS proxy in front)", url);
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos)
    fail("--url {}: give the server's root (http://HOST:PORT); the bench sends to /v1/completions", url);
  Target t;
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.find(']');  // [::1]:8000
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket)) {
    t.host = rest;
    t.port = "80";
  } else {
    t.host = rest.substr(0, colon);
    t.port = rest.substr(colon + 1);
  }
  if (!t.host.empty() && t.host.front() == '[' && t.host.back() == ']') t.host = t.host.substr(1, t.host.size() - 2);
  if (t.host.empty()) fail("--url {}: no host", url);
  if (t.port.empty() || t.port.size() > 5 || !std::all_of(t.port.begin(), t.port.end(), ::isdigit) ||
      std::stoi(t.port) < 1 || std::stoi(t.port) > 65535)
    fail("--url {}: the port must be a number in 1..65535", url);
  t.base = "http://" + rest;
  return t;
}

// ---- One streaming request over a plain socket -------------------------------------------------

struct Failure {
  std::string kind;
  std::string detail;
};

class Connection {
 public:
  explicit Connection(Clock::time_point deadline) : deadline_(deadline) {}
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Connects to the first address that answers; a Failure names why none did.
  std::optional<Failure> open(const Target& t) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (const int rc = ::getaddrinfo(t.host.c_str(), t.port.c_str(), &hints, &res); rc != 0)
      return Failure{"connect_error", fmt::format("resolving {}: {}", t.host, ::gai_strerror(rc))};
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
    Failure last{"connect_error", "no address"};
    for (addrinfo* a = res; a; a = a->ai_next) {
      fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ < 0) continue;
      int rc = ::connect(fd_, a->ai_addr, a->ai_addrlen);
      int err = rc == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        const int ready = wait(POLLOUT);
        if (ready == 0) return Failure{"connect_timeout", "no answer to the connect before the timeout"};
        socklen_t len = sizeof err;
        ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      }
      if (err == 0) {
        const int one = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return std::nullopt;
      }
      last = err == ECONNREFUSED ? Failure{"connect_refused", std::strerror(err)}
             : err == ETIMEDOUT  ? Failure{"connect_timeout", std::strerror(err)}
                                 : Failure{"connect_error", std::strerror(err)};
      ::close(fd_);
      fd_ = -1;
    }
    return last;
  }

  std::optional<Failure> send_all(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (wait(POLLOUT) == 0) return Failure{"timeout", "sending the request"};
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return Failure{"reset", fmt::format("sending the request: {}", std::strerror(errno))};
    }
    return std::nullopt;
  }

  // Appends what arrives to `buffer`: >0 bytes, 0 at the end of the stream, -1 on timeout, -2 on error.
  ssize_t receive(std::string& buffer) {
    char chunk[16384];
    while (true) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        buffer.append(chunk, static_cast<size_t>(n));
        return n;
      }
      if (n == 0) return 0;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        errno_ = errno;
        return -2;
      }
      if (wait(POLLIN) == 0) return -1;
    }
  }
  int last_errno() const { return errno_; }

 private:
  // 1 when ready (or in error: the next call says which), 0 when the deadline passed.
  int wait(short events) {
    while (true) {
      // Milliseconds rounded up, so a wait never ends before its deadline.
      const auto left_us =
          std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - Clock::now()).count();
      if (left_us <= 0) return 0;
      pollfd p{fd_, events, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>((left_us + 999) / 1000, 1000)));
      if (rc > 0) return 1;
      if (rc < 0 && errno != EINTR) return 1;
    }
  }
  int fd_ = -1;
  int errno_ = 0;
  Clock::time_point deadline_;
};

// Incremental HTTP/1.1 response reader: status line and headers, then the body (chunked, sized, or
// to the end of the connection) handed on as it is decoded.
class ResponseReader {
 public:
  // Feeds raw bytes; returns false on a malformed response (`error` says what).
  bool feed(std::string& raw, std::string& body_out) {
    if (!headers_done_) {
      const size_t end = raw.find("\r\n\r\n");
      if (end == std::string::npos) return raw.size() < (1 << 16) || (error = "headers over 64 KiB", false);
      const std::string head = raw.substr(0, end);
      raw.erase(0, end + 4);
      if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12) return error = "not an HTTP/1.x response", false;
      status = std::atoi(head.c_str() + 9);
      std::string lower = head;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      chunked_ = lower.find("transfer-encoding: chunked") != std::string::npos;
      if (const size_t cl = lower.find("content-length:"); cl != std::string::npos)
        remaining_ = std::atoll(lower.c_str() + cl + 15);
      headers_done_ = true;
    }
    if (!chunked_) {
      if (remaining_ >= 0) {
        const size_t take = std::min<size_t>(raw.size(), static_cast<size_t>(remaining_));
        body_out.append(raw, 0, take);
        remaining_ -= static_cast<int64_t>(take);
        complete = remaining_ == 0;
      } else {
        body_out += raw;
      }
      raw.clear();
      return true;
    }
    while (!complete) {
      if (chunk_left_ == 0) {
        const size_t eol = raw.find("\r\n");
        if (eol == std::string::npos) return true;
        const std::string size_line = raw.substr(0, eol);
        char* endp = nullptr;
        const unsigned long long size = std::strtoull(size_line.c_str(), &endp, 16);
        if (endp == size_line.c_str()) return error = "malformed chunk size", false;
        if (size == 0) {
          complete = true;  // trailers, if any, are ignored
          raw.clear();
          return true;
        }
        raw.erase(0, eol + 2);
        chunk_left_ = static_cast<int64_t>(size) + 2;  // data + CRLF
      }
      if (raw.empty()) return true;
      const size_t take = std::min<size_t>(raw.size(), static_cast<size_t>(chunk_left_));
      const size_t data = static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(take, chunk_left_ - 2)));
      body_out.append(raw, 0, data);
      raw.erase(0, take);
      chunk_left_ -= static_cast<int64_t>(take);
    }
    return true;
  }
  bool headers_done() const { return headers_done_; }
  bool to_end_of_connection() const { return !chunked_ && remaining_ < 0; }

  int status = 0;
  bool complete = false;
  std::string error;

 private:
  bool headers_done_ = false;
  bool chunked_ = false;
  int64_t remaining_ = -1;
  int64_t chunk_left_ = 0;
};

// A request to send; its prompt is drawn when it is sent (random_prompt is keyed by seed and index),
// so a long run holds no prompts in memory.
struct RequestPlan {
  int index = 0;
  int prompt_len = 0;
  int vocab = 0;
  uint64_t prompt_key = 0;
  int output_len = 0;
  double scheduled = 0.0;
};

struct ClientConfig {
  Target target;
  std::string api_key;
  std::string model;
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
  double timeout_s = 600.0;
  double max_duration_s = 0.0;                                 // the load's limit (0: none)
  Clock::time_point load_deadline = Clock::time_point::max();  // origin + max_duration_s, set by run_load
};

std::string request_text(const ClientConfig& c, const RequestPlan& plan) {
  Json body{{"prompt", random_prompt(plan.vocab, plan.prompt_len, c.seed, plan.prompt_key)},
            {"max_tokens", plan.output_len},
            {"ignore_eos", true},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"temperature", c.temperature},
            {"top_p", c.top_p},
            // Request i samples from seed + i (the warm-up, index -1, from seed), kept within int64.
            {"seed", static_cast<int64_t>((c.seed + static_cast<uint64_t>(plan.index + 1)) >> 1)}};
  if (!c.model.empty()) body["model"] = c.model;
  const std::string payload = body.dump();
  std::string head = fmt::format(
      "POST /v1/completions HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n"
      "Accept: text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n",
      c.target.host, c.target.port, payload.size());
  if (!c.api_key.empty()) head += "Authorization: Bearer " + c.api_key + "\r\n";
  return head + "\r\n" + payload;
}

// The text a completion or chat chunk carries (empty for role-only, finish-only and usage chunks).
std::string chunk_text(const Json& choice) {
  if (choice.contains("text") && choice["text"].is_string()) return choice["text"].get<std::string>();
  std::string out;
  if (choice.contains("delta") && choice["delta"].is_object())
    for (const char* key : {"content", "reasoning_content", "reasoning"})
      if (choice["delta"].contains(key) && choice["delta"][key].is_string())
        out += choice["delta"][key].get<std::string>();
  return out;
}

// Sends one request and reads its event stream; fills `rec` (times relative to `origin`).
void run_request(const ClientConfig& c, const RequestPlan& plan, Clock::time_point origin, RequestRecord& rec) {
  rec.index = plan.index;
  rec.prompt_len = plan.prompt_len;
  rec.output_len = plan.output_len;
  rec.scheduled = plan.scheduled;
  const std::string request = request_text(c, plan);  // built before the clock starts, as vLLM's payload
  const Clock::time_point start = Clock::now();
  rec.sent = seconds_between(origin, start);
  const auto deadline =
      std::min(start + std::chrono::microseconds(static_cast<int64_t>(c.timeout_s * 1e6)), c.load_deadline);
  // A wait that ends at the load's limit rather than the request's own timeout says so.
  auto timed_out = [&](std::string what) {
    if (deadline == c.load_deadline)
      return Failure{"max_duration",
                     fmt::format("{} when the load's --max-duration of {} s ended", what, c.max_duration_s)};
    return Failure{"timeout", fmt::format("{} for the rest of the {} s timeout", what, c.timeout_s)};
  };
  auto failed = [&](Failure f) {
    if ((f.kind == "connect_timeout" || f.kind == "timeout") && deadline == c.load_deadline &&
        Clock::now() >= deadline)
      f = timed_out(f.detail);
    rec.ok = false;
    rec.error = std::move(f.kind);
    rec.error_detail = std::move(f.detail);
    rec.e2e = seconds_between(start, Clock::now());
  };

  Connection conn(deadline);
  if (auto f = conn.open(c.target)) {
    f->detail += " (" + c.target.base + ")";
    return failed(*f);
  }
  // A server may answer before it has read the whole request (413 for a body over its limit) and close
  // the connection: the send then fails, but the answer is in the socket and is the request's outcome.
  const std::optional<Failure> send_failure = conn.send_all(request);
  if (send_failure && send_failure->kind != "reset") return failed(*send_failure);

  ResponseReader reader;
  std::string raw, body, events;
  bool done = false;
  std::optional<Clock::time_point> last_text;
  while (!done) {
    const ssize_t n = conn.receive(raw);
    const Clock::time_point now = Clock::now();
    if (n == -1) return failed(timed_out("no byte"));
    if (n == -2) {
      if (send_failure && !reader.headers_done()) return failed(*send_failure);
      const int e = conn.last_errno();
      return failed({e == ECONNRESET ? "reset" : "read_error", std::strerror(e)});
    }
    if (n == 0) {
      if (send_failure && !reader.headers_done()) return failed(*send_failure);
      if (!reader.headers_done()) return failed({"reset", "the server closed the connection before answering"});
      if (reader.status != 200 && reader.to_end_of_connection()) break;
      if (reader.status == 200)
        return failed({"truncated_stream", fmt::format("the stream ended after {} text chunks without [DONE]",
                                                       rec.chunks)});
      break;
    }
    std::string fresh;
    if (!reader.feed(raw, fresh)) return failed({"bad_response", reader.error});
    if (!reader.headers_done()) continue;
    if (reader.status != 200) {
      body += fresh;
      if (reader.complete) break;
      continue;
    }
    events += fresh;
    // Server-sent events: blocks separated by a blank line; the "data:" lines of each.
    while (true) {
      size_t end = events.find("\n\n");
      size_t sep = 2;
      if (const size_t crlf = events.find("\r\n\r\n"); crlf != std::string::npos && crlf < end) {
        end = crlf;
        sep = 4;
      }
      if (end == std::string::npos) break;
      const std::string block = events.substr(0, end);
      events.erase(0, end + sep);
      std::string data;
      size_t pos = 0;
      while (pos < block.size()) {
        size_t eol = block.find('\n', pos);
        if (eol == std::string::npos) eol = block.size();
        std::string line = block.substr(pos, eol - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) data += line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
        pos = eol + 1;
      }
      if (data.empty()) continue;
      if (data == "[DONE]") {
        done = true;
        break;
      }
      Json chunk;
      try {
        chunk = Json::parse(data);
      } catch (const std::exception&) {
        return failed({"bad_response", "an event that is not JSON: " + data.substr(0, 200)});
      }
      if (chunk.contains("error")) {
        const Json& e = chunk["error"];
        return failed({"stream_error", e.is_object() ? e.value("message", e.dump()) : e.dump()});
      }
      if (chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty()) {
        if (!chunk_text(chunk["choices"][0]).empty()) {
          // A chunk that carries text: the first ends the time to first token, the others an ITL gap.
          if (!last_text) {
            rec.ttft = seconds_between(start, now);
          } else {
            rec.itl.push_back(seconds_between(*last_text, now));
          }
          last_text = now;
          rec.chunks++;
        }
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        const Json& u = chunk["usage"];
        if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
          rec.output_tokens = u["completion_tokens"].get<int64_t>();
          rec.tokens_from_usage = true;
        }
        if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
          rec.prompt_tokens = u["prompt_tokens"].get<int64_t>();
      }
    }
  }
  if (reader.status != 200) {
    std::string detail = body.substr(0, 300);
    try {
      const Json j = Json::parse(body);
      if (j.contains("error") && j["error"].is_object()) detail = j["error"].value("message", detail);
    } catch (const std::exception&) {
    }
    return failed({fmt::format("http_{}", reader.status), detail});
  }
  rec.e2e = seconds_between(start, Clock::now());
  if (!rec.tokens_from_usage) rec.output_tokens = rec.chunks;  // a server that reports no usage
  if (rec.prompt_tokens == 0) rec.prompt_tokens = rec.prompt_len;
  if (rec.chunks == 0) return failed({"empty_stream", "the stream carried no text"});
  rec.ok = true;
}

// The id of the first model GET /v1/models lists (what the requests name when --served-model is not
// given); empty when the server does not answer it (the requests then report their own errors).
std::string first_served_model(const Target& target, const std::string& api_key, double timeout_s) {
  Connection conn(Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(std::min(timeout_s, 30.0) * 1e3)));
  if (conn.open(target)) return "";
  std::string head = fmt::format("GET /v1/models HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n", target.host,
                                 target.port);
  if (!api_key.empty()) head += "Authorization: Bearer " + api_key + "\r\n";
  if (conn.send_all(head + "\r\n")) return "";
  ResponseReader reader;
  std::string raw, body;
  while (!reader.complete) {
    const ssize_t n = conn.receive(raw);
    if (n < 0) return "";
    if (!reader.feed(raw, body)) return "";
    if (n == 0) break;
  }
  if (reader.status != 200) return "";
  try {
    const Json j = Json::parse(body);
    if (j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].contains("id"))
      return j["data"][0]["id"].get<std::string>();
  } catch (const std::exception&) {
  }
  return "";
}

// ---- The load -------------------------------------------------------------------------------------

// Open loop: requests are released at their arrival times, whatever is still running; a client
// thread takes each (with --max-concurrency, that many threads: a request then waits for a free one).
// With a --max-duration, nothing is released or started after origin + max_duration_s and the requests
// running then end at it (error kind max_duration); the ones never sent are recorded as not_sent.
std::vector<RequestRecord> run_load(const ClientConfig& load_client, const std::vector<RequestPlan>& plans,
                                    int threads, Clock::time_point& origin, double& duration) {
  std::vector<RequestRecord> records(plans.size());
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<size_t> ready;
  bool closed = false;
  origin = Clock::now();
  std::vector<char> started(plans.size(), 0);
  ClientConfig client = load_client;
  if (client.max_duration_s > 0)
    client.load_deadline =
        origin + std::chrono::microseconds(static_cast<int64_t>(client.max_duration_s * 1e6));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (true) {
        size_t i;
        {
          std::unique_lock lock(mutex);
          cv.wait(lock, [&] { return closed || !ready.empty(); });
          if (ready.empty()) return;
          i = ready.front();
          ready.pop_front();
        }
        if (Clock::now() >= client.load_deadline) continue;  // released, but its turn came too late
        started[i] = 1;
        run_request(client, plans[i], origin, records[i]);
      }
    });
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    const Clock::time_point at =
        origin + std::chrono::microseconds(static_cast<int64_t>(plans[i].scheduled * 1e6));
    if (at >= client.load_deadline) break;
    std::this_thread::sleep_until(at);
    {
      std::lock_guard lock(mutex);
      ready.push_back(i);
    }
    cv.notify_one();
  }
  {
    std::lock_guard lock(mutex);
    closed = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  duration = seconds_between(origin, Clock::now());
  for (size_t i = 0; i < plans.size(); ++i) {
    if (started[i]) continue;
    RequestRecord& r = records[i];
    r.index = plans[i].index;
    r.prompt_len = plans[i].prompt_len;
    r.output_len = plans[i].output_len;
    r.scheduled = plans[i].scheduled;
    r.error = "not_sent";
    r.error_detail =
        fmt::format("the load's --max-duration of {} s ended before its turn", client.max_duration_s);
  }
  return records;
}

Json stats_json(const std::vector<double>& seconds) {
  double sum = 0.0;
  for (double v : seconds) sum += v;
  const double mean = seconds.empty() ? 0.0 : sum / static_cast<double>(seconds.size());
  double var = 0.0;
  for (double v : seconds) var += (v - mean) * (v - mean);
  const double sd = seconds.empty() ? 0.0 : std::sqrt(var / static_cast<double>(seconds.size()));
  return Json{{"mean_ms", 1e3 * mean},
              {"p50_ms", 1e3 * percentile(seconds, 50)},
              {"p90_ms", 1e3 * percentile(seconds, 90)},
              {"p99_ms", 1e3 * percentile(seconds, 99)},
              {"std_ms", 1e3 * sd},
              {"max_ms", seconds.empty() ? 0.0 : 1e3 * *std::max_element(seconds.begin(), seconds.end())},
              {"count", seconds.size()}};
}

// The server started in this process, stopped (drained) when the benchmark is done.
struct InProcessServer {
  std::unique_ptr<backend::Backend> backend;
  engine::ModelBundle bundle;
  std::unique_ptr<server::Server> server;
  std::thread thread;
  int port = 0;
  int exit_code = 0;

  ~InProcessServer() { stop(); }
  void stop() {
    if (!thread.joinable()) return;
    server->request_stop();
    thread.join();
  }
};

}  // namespace

std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed) {
  std::vector<double> out(static_cast<size_t>(std::max(n, 0)), 0.0);
  if (!std::isfinite(rate)) return out;
  std::mt19937_64 rng(seed ^ 0x41525249564c53ull);  // the arrivals' own stream
  std::exponential_distribution<double> gap(rate);
  double t = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) t += gap(rng);  // the first request leaves at time 0, as vLLM's does
    out[i] = t;
  }
  return out;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

Json serve_metrics(const std::vector<RequestRecord>& records, double duration) {
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t completed = 0, output = 0, input = 0, chunks = 0;
  std::map<std::string, int64_t> errors;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      errors[r.error]++;
      continue;
    }
    completed++;
    output += r.output_tokens;
    input += r.prompt_tokens;
    chunks += r.chunks;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / static_cast<double>(r.output_tokens - 1));
  }
  const double d = duration > 0 ? duration : 1e-9;
  Json m{{"completed", completed},
         {"failed", static_cast<int64_t>(records.size()) - completed},
         {"duration_s", duration},
         {"total_input_tokens", input},
         {"total_output_tokens", output},
         {"text_chunks", chunks},
         {"request_throughput", static_cast<double>(completed) / d},
         {"output_tok_s", static_cast<double>(output) / d},
         {"total_tok_s", static_cast<double>(input + output) / d},
         {"ttft", stats_json(ttft)},
         {"tpot", stats_json(tpot)},
         {"itl", stats_json(itl)},
         {"e2el", stats_json(e2e)},
         {"errors", Json::object()}};
  for (const auto& [kind, count] : errors) m["errors"][kind] = count;
  return m;
}

Json serve_validation(const std::vector<RequestRecord>& records) {
  Json problems = Json::array();
  std::map<std::string, int64_t> errors;
  std::map<std::string, std::string> example;
  int64_t wrong_length = 0, no_usage = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      errors[r.error]++;
      if (!example.count(r.error)) example[r.error] = r.error_detail;
      continue;
    }
    if (!r.tokens_from_usage) no_usage++;
    if (r.output_tokens != r.output_len) {
      if (wrong_length < 5)
        problems.push_back(fmt::format("request {}: {} output tokens, asked for {} (ignore_eos)", r.index,
                                       r.output_tokens, r.output_len));
      wrong_length++;
    }
  }
  if (wrong_length > 5) problems.push_back(fmt::format("{} requests in all with the wrong token count", wrong_length));
  for (const auto& [kind, count] : errors)
    problems.push_back(fmt::format("{} of {} requests failed with {} (e.g. {})", count, records.size(), kind,
                                   example[kind]));
  int64_t completed = 0;
  for (const RequestRecord& r : records) completed += r.ok ? 1 : 0;
  return Json{{"ok", problems.empty()},
              {"problems", problems},
              {"requests", records.size()},
              {"completed", completed},
              {"exact_output_lengths", wrong_length == 0},
              {"tokens_counted_from", no_usage == 0 ? "usage.completion_tokens" : "text chunks (no usage)"}};
}

Json run_serve_bench(const BenchOptions& o, const ServeBenchOptions& s) {
  Json run = run_header();
  run["protocol"] = "serve";
  run["quick"] = o.quick;

  ClientConfig client;
  client.api_key = s.api_key;
  client.temperature = o.temperature;
  client.top_p = o.top_p;
  client.seed = o.seed;
  client.timeout_s = s.timeout_s;
  client.max_duration_s = s.max_duration_s;
  int vocab = s.prompt_vocab;
  std::unique_ptr<InProcessServer> local;
  Json server_json;
  if (s.url.empty()) {
    if (o.random_weights)
      fail("bench serve starts kvdice serve, which needs a tokenizer: give --model DIR (a checkpoint; "
           "tools/gpu/make_checkpoint.py writes random weights of a real shape with one), or --url");
    if (o.model_path.empty()) fail("bench serve needs --model PATH|default (started here) or --url http://HOST:PORT");
    // A client gone mid-write is an error code, not a signal. SIGINT/SIGTERM keep their default (they
    // end the bench); the server is stopped with Server::request_stop (InProcessServer::stop).
    ::signal(SIGPIPE, SIG_IGN);
    local = std::make_unique<InProcessServer>();
    local->backend = backend::make_backend(o.backend);
    local->bundle = engine::load_model_bundle(o.model_path, {local->backend->block_weight_types()});
    server::ServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.api_key = s.api_key;
    so.model_name = s.served_model.empty() ? "default" : s.served_model;
    so.limits.kv.policy = o.policy;
    so.limits.kv.budget.window = o.window;
    so.limits.kv.budget.budget = policy::make_policy(o.policy, "--policy")->evicts() ? o.budget : 0;
    if (so.limits.kv.budget.bounded()) so.limits.kv.budget.validate();
    so.limits.default_max_tokens = std::max(so.limits.default_max_tokens, 1);
    so.engine.max_batch = s.max_batch > 0 ? s.max_batch : local->backend->is_cpu() ? 64 : 1024;  // serve's
    so.engine.max_queue = s.max_queue > 0 ? s.max_queue : s.num_requests;
    so.drain_timeout_s = 5;
    local->server = std::make_unique<server::Server>(local->bundle, *local->backend, so);
    local->port = local->server->bind();
    InProcessServer* raw = local.get();
    raw->thread = std::thread([raw] { raw->exit_code = raw->server->serve_until_signal(); });
    client.target = Target{"127.0.0.1", std::to_string(local->port), fmt::format("http://127.0.0.1:{}", local->port)};
    client.model = so.model_name;
    if (vocab == 0) vocab = local->bundle.model->config().vocab;
    run["model"] = fmt::format("checkpoint {} ({})", local->bundle.source, local->bundle.format);
    run["model_shape"] = model_shape_json(local->bundle.model->config());
    run["device"] = local->backend->name();
    const engine::MemoryPlan& plan = local->server->engine_host().memory_plan();
    server_json = Json{{"kind", "kvdice serve in this process"},
                       {"url", client.target.base},
                       {"policy", so.limits.kv.policy},
                       {"budget", so.limits.kv.budget.budget},
                       {"window", so.limits.kv.budget.window},
                       {"max_batch", so.engine.max_batch},
                       {"max_queue", so.engine.max_queue},
                       {"kv_slots", local->server->engine_host().options().kv_slots},
                       {"kv_pool_gib", static_cast<double>(plan.kv_pool_bytes) / (1024.0 * 1024.0 * 1024.0)},
                       {"kv_pool_rule", plan.kv_pool_rule}};
  } else {
    client.target = parse_url(s.url);
    client.model = s.served_model.empty() ? first_served_model(client.target, s.api_key, s.timeout_s) : s.served_model;
    if (vocab == 0) vocab = 1000;
    run["model"] = client.model.empty() ? "the server's model (GET /v1/models gave none)" : client.model;
    run["device"] = "server at " + client.target.base;
    server_json = Json{{"kind", "external (--url)"}, {"url", client.target.base}};
  }
  run["prompts"] = fmt::format("random token ids, uniform in [0, {}), seeded (seed {}), sent as a token-id prompt",
                               vocab, o.seed);

  // The requests: lengths uniform within the range ratio (vLLM's random dataset), then arrivals.
  std::mt19937_64 lengths(o.seed ^ 0x4c454e47544853ull);
  auto draw = [&](int len) {
    const int lo = std::max(1, static_cast<int>(std::floor(len * (1.0 - s.range_ratio))));
    const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1.0 + s.range_ratio))));
    return std::uniform_int_distribution<int>(lo, hi)(lengths);
  };
  const std::vector<double> arrivals = poisson_arrivals(s.num_requests, s.request_rate, o.seed);
  std::vector<RequestPlan> plans(static_cast<size_t>(s.num_requests));
  for (int i = 0; i < s.num_requests; ++i) {
    RequestPlan& p = plans[static_cast<size_t>(i)];
    p.index = i;
    p.prompt_len = draw(o.prompt_len);
    p.vocab = vocab;
    p.prompt_key = static_cast<uint64_t>(i);
    p.output_len = draw(o.output_len);
    p.scheduled = arrivals[static_cast<size_t>(i)];
  }
  const int threads = s.max_concurrency > 0 ? std::min(s.max_concurrency, s.num_requests)
                                            : std::min(s.num_requests, kMaxClientThreads);

  // One untimed request of the same shape first (records the decode graphs of a fresh server).
  Json warmup = nullptr;
  if (o.warmup_tokens > 0) {
    RequestPlan w;
    w.index = -1;
    w.prompt_len = o.prompt_len;
    w.vocab = vocab;
    w.prompt_key = uint64_t{1} << 40;
    w.output_len = std::min(o.warmup_tokens, o.output_len);
    RequestRecord r;
    run_request(client, w, Clock::now(), r);
    warmup = Json{{"output_tokens", w.output_len}, {"ok", r.ok}, {"seconds", r.e2e}};
    if (!r.ok) warmup["error"] = r.error + ": " + r.error_detail;
  }

  Clock::time_point origin;
  double duration = 0.0;
  const std::vector<RequestRecord> records = run_load(client, plans, threads, origin, duration);
  if (local) local->stop();

  Json parameters{{"num_requests", s.num_requests},
                  {"request_rate", std::isfinite(s.request_rate) ? Json(s.request_rate) : Json("inf")},
                  {"arrivals", std::isfinite(s.request_rate) ? "poisson" : "all at time 0"},
                  {"max_concurrency", s.max_concurrency > 0 ? Json(s.max_concurrency) : Json(nullptr)},
                  {"client_threads", threads},
                  {"input_len", o.prompt_len},
                  {"output_len", o.output_len},
                  {"range_ratio", s.range_ratio},
                  {"prompt_vocab", vocab},
                  {"temperature", o.temperature},
                  {"top_p", o.top_p},
                  {"ignore_eos", true},
                  {"stream", true},
                  {"endpoint", "/v1/completions"},
                  {"timeout_s", s.timeout_s},
                  {"max_duration_s", s.max_duration_s > 0 ? Json(s.max_duration_s) : Json(nullptr)},
                  {"warmup_tokens", o.warmup_tokens},
                  {"server", server_json}};
  Json metrics = serve_metrics(records, duration);
  // Arrivals as scheduled and as sent: the open loop kept its times when the lag stays small.
  double lag_max = 0.0, last_scheduled = 0.0;
  int64_t sent = 0;
  for (const RequestRecord& r : records) {
    lag_max = std::max(lag_max, r.sent - r.scheduled);
    last_scheduled = std::max(last_scheduled, r.scheduled);
    sent += r.ok || (!r.error.empty() && r.error != "not_sent") ? 1 : 0;  // done or ended with an error
  }
  metrics["arrivals"] = Json{{"sent", sent},
                             {"scheduled_span_s", last_scheduled},
                             {"offered_rate", s.num_requests > 1 && last_scheduled > 0
                                                  ? Json(static_cast<double>(s.num_requests - 1) / last_scheduled)
                                                  : Json(nullptr)},
                             {"max_send_lag_s", lag_max}};
  Json validation = serve_validation(records);
  if (sent != s.num_requests) {
    validation["problems"].push_back(fmt::format("{} of {} requests were sent", sent, s.num_requests));
    validation["ok"] = false;
  }
  const bool stopped = std::any_of(records.begin(), records.end(), [](const RequestRecord& r) {
    return r.error == "not_sent" || r.error == "max_duration";
  });
  if (stopped) {
    validation["problems"].push_back(
        fmt::format("the load stopped at its --max-duration of {} s", s.max_duration_s));
    validation["ok"] = false;
  }
  if (!warmup.is_null()) run["warmup"] = warmup;
  if (s.save_detailed) {
    Json detailed = Json::array();
    for (const RequestRecord& r : records) {
      Json itl = Json::array();
      for (double g : r.itl) itl.push_back(1e3 * g);
      detailed.push_back(Json{{"index", r.index},         {"prompt_len", r.prompt_len},
                              {"output_len", r.output_len}, {"scheduled_s", r.scheduled},
                              {"sent_s", r.sent},           {"ok", r.ok},
                              {"error", r.error},           {"error_detail", r.error_detail},
                              {"ttft_ms", 1e3 * r.ttft},    {"e2e_ms", 1e3 * r.e2e},
                              {"output_tokens", r.output_tokens}, {"text_chunks", r.chunks},
                              {"itl_ms", itl}});
    }
    run["requests"] = detailed;
  }
  run["parameters"] = parameters;
  run["parameters"]["seed"] = o.seed;
  run["results"] = Json::array({Json{{"label", "serve"}, {"metrics", metrics}, {"validation", validation}}});
  run["validation"] = Json{{"ok", validation["ok"]}, {"problems", Json::array()}};
  for (const Json& p : validation["problems"]) run["validation"]["problems"].push_back("serve: " + p.get<std::string>());
  if (local) {
    run["peak_memory_bytes"] = local->backend->peak_memory_bytes();
    if (local->exit_code != 0) {
      run["validation"]["ok"] = false;
      run["validation"]["problems"].push_back(fmt::format("the server exited with code {}", local->exit_code));
    }
  }
  return run;
}

}  // namespace kvdice::bench
