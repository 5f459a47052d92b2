#include "server/server.h"

#include <fmt/core.h>
#include <arpa/inet.h>
#include <httplib.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <optional>
#include <random>
#include <set>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/completion_response.h"
#include "server/connection_pool.h"
#include "server/openapi.h"

namespace kvdice::server {

namespace {

// SIGINT/SIGTERM reach serve_until_signal through a pipe written by the handler. A handler, not a
// blocked mask and sigwait: threads that libraries start before main (OpenBLAS's pool) keep the
// signals unblocked, and the kernel may deliver to any of them; with no handler the default action
// killed the process instead of draining. A handler runs on whichever thread takes the signal.
// Server::request_stop writes to the same pipe: a server run inside another program (bench serve)
// is stopped without signals.
int stop_pipe[2] = {-1, -1};

void open_stop_pipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (pipe2(stop_pipe, O_CLOEXEC) != 0) fail("cannot create the server's stop pipe: {}", std::strerror(errno));
  });
}

extern "C" void on_stop_signal(int sig) {
  const char c = static_cast<char>(sig);
  const ssize_t written = write(stop_pipe[1], &c, 1);  // async-signal-safe; a full pipe already holds one
  (void)written;
}

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s(n, '0');
  for (auto& c : s) c = digits[rng() & 15];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Eviction and sampling streams of choice `index` of a seeded request: the same seed reproduces
// the same choices, in any batch.
uint64_t seeded_stream(uint64_t seed, int index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.to_json()); }

// A POST body must say it is JSON: a browser page may send text/plain or form bodies to any origin
// without a CORS preflight, and this check is what keeps such a page from driving a local server.
bool is_json_content_type(const std::string& value) {
  std::string media = value.substr(0, value.find(';'));
  while (!media.empty() && media.back() == ' ') media.pop_back();
  for (auto& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return media == "application/json";
}

bool is_reasoning_template(tokenizer::ChatTemplate t) {
  using T = tokenizer::ChatTemplate;
  return t == T::Qwen3 || t == T::Qwen3Thinking || t == T::DeepSeekR1 || t == T::Phi4Reasoning;
}

}  // namespace

struct Server::Impl {
  Impl(const engine::ModelBundle& b, backend::Backend& backend, ServerOptions o)
      : bundle(b),
        options(std::move(o)),
        metrics(options.engine.kv_slots),
        host(*b.model, backend, options.engine, options.limits.kv, metrics) {
    options.engine.kv_slots = host.options().kv_slots;  // the engine's pool, exact
    metrics.set_kv_capacity(options.engine.kv_slots);
    try {
      chat_template = engine::resolve_chat_template(bundle, options.chat_template);
      has_chat_template = true;
    } catch (const Error& e) {
      if (!options.chat_template.empty()) throw;
      chat_template_error = e.what();  // /v1/chat/completions answers 400 with this; completions still work
    }
    install_routes();
  }

  const engine::ModelBundle& bundle;
  ServerOptions options;
  Metrics metrics;
  EngineHost host;
  httplib::Server http;
  tokenizer::ChatTemplate chat_template{};
  bool has_chat_template = false;
  std::string chat_template_error;
  int port = 0;
  int listen_fd = -1;  // the listening socket, recorded by the socket-options hook

  void install_routes();
  // Reads the body with the size limit applied to every framing; answers 415/413 itself and returns
  // nullopt when the body is refused.
  std::optional<std::string> read_json_body(const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& reader);
  void completion(const httplib::Request& req, const std::string& text, httplib::Response& res,
                  Endpoint endpoint);
};

void Server::Impl::install_routes() {
  const int threads = options.http_threads;
  http.new_task_queue = [threads] { return new ConnectionPool(threads); };
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which lets a second server bind the
  // same port and silently take half of the connections. The hook also records the socket, so that
  // bind() can enlarge its backlog.
  http.set_socket_options([this](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = fd;
  });
  http.set_payload_max_length(options.max_body_bytes);
  http.set_keep_alive_timeout(options.keep_alive_s);
  http.set_keep_alive_max_count(1000);
  http.set_read_timeout(30);
  http.set_write_timeout(30);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string expected = "Bearer " + options.api_key;
    if (req.get_header_value("Authorization") != expected) {
      send_json(res, 401,
                error_json(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'", "",
                           "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.is_chunked_content_provider_)
          return httplib::Server::HandlerResponse::Unhandled;
        std::string message = fmt::format("{} {} failed with HTTP {}", req.method, req.path, res.status);
        if (res.status == 413) message = "request body too large";
        if (res.status == 404) message = fmt::format("no route {} {}", req.method, req.path);
        send_json(res, res.status, error_json(res.status, message));
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_json(res, 500, error_json(500, message));
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    static const std::set<std::string> known = {
        "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/openapi.json"};
    metrics.request_finished(known.count(req.path) ? req.path : "other", res.status);
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (host.draining()) {
      send_json(res, 503, {{"status", "draining"}});
    } else {
      send_json(res, 200, {{"status", "ok"}});
    }
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    metrics.set_policies_held(host.policies_held());
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  http.Get("/openapi.json", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(openapi_document(options.model_name), "application/json");
  });
  auto model_card = [this] {
    return Json{{"id", options.model_name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "kvdice"},
                {"max_model_len", bundle.model->config().max_position}};
  };
  http.Get("/v1/models", [model_card](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", Json::array({model_card()})}});
  });
  http.Get(R"(/v1/models/(.+))", [this, model_card](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != options.model_name) {
      send_error(res, ApiError(404, fmt::format("The model '{}' does not exist", std::string(req.matches[1])),
                               "model", "model_not_found"));
      return;
    }
    send_json(res, 200, model_card());
  });
  for (const auto& [path, endpoint] : {std::pair{"/v1/chat/completions", Endpoint::Chat},
                                       std::pair{"/v1/completions", Endpoint::Completion}}) {
    http.Post(path, [this, endpoint](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader) {
      if (const auto text = read_json_body(req, res, reader)) completion(req, *text, res, endpoint);
    });
  }
}

std::optional<std::string> Server::Impl::read_json_body(const httplib::Request& req, httplib::Response& res,
                                                        const httplib::ContentReader& reader) {
  const std::string type = req.get_header_value("Content-Type");
  if (!is_json_content_type(type)) {
    send_error(res, ApiError(415,
                             fmt::format("the request body must be sent as 'Content-Type: application/json' "
                                         "(got '{}')",
                                         type.substr(0, 100)),
                             "", "unsupported_media_type"));
    res.set_header("Connection", "close");
    return std::nullopt;
  }
  const size_t limit = options.max_body_bytes;
  auto too_large = [&] {
    send_error(res, ApiError(413, fmt::format("request body too large: the limit is {} bytes", limit), "",
                             "request_too_large"));
    res.set_header("Connection", "close");
    return std::nullopt;
  };
  // A declared length beyond the limit is refused before a byte of the body is read.
  if (req.has_header("Content-Length") && req.get_header_value<uint64_t>("Content-Length") > limit)
    return too_large();
  std::string body;
  bool over = false;
  const bool complete = reader([&](const char* data, size_t length) {
    if (length > limit - body.size()) {
      over = true;
      return false;  // stop reading: a chunked body has no declared length to check up front
    }
    body.append(data, length);
    return true;
  });
  if (over || res.status == 413) return too_large();
  if (!complete) {
    send_error(res, ApiError(400, "the request body could not be read completely", "", "invalid_body"));
    res.set_header("Connection", "close");
    return std::nullopt;
  }
  return body;
}

void Server::Impl::completion(const httplib::Request&, const std::string& text, httplib::Response& res,
                              Endpoint endpoint) {
  try {
    Json body;
    try {
      body = Json::parse(text);
    } catch (const Json::exception& e) {
      throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()), "",
                     "invalid_json");
    }
    const CompletionRequest r = parse_completion_request(body, endpoint, options.limits);
    if (r.model != options.model_name)
      throw ApiError(
          404,
          fmt::format("The model '{}' does not exist; this server serves '{}'", r.model, options.model_name),
          "model", "model_not_found");
    const model::ModelConfig& config = bundle.model->config();
    const tokenizer::Tokenizer& tok = *bundle.tokenizer;

    ResponseContext ctx;
    std::vector<int> prompt;
    const char* input_field = endpoint == Endpoint::Chat ? "messages" : "prompt";
    try {
      if (endpoint == Endpoint::Chat) {
        if (!has_chat_template)
          bad_request("messages", "this model has no usable chat template: " + chat_template_error);
        const std::string rendered =
            tokenizer::render_chat(chat_template, r.messages, {true, r.enable_thinking});
        prompt = tok.encode_prompt(rendered, /*parse_special=*/true);
        ctx.reasoning = is_reasoning_template(chat_template);
        ctx.think_opened = rendered.ends_with("<think>\n");
      } else if (r.prompt_ids) {
        prompt = *r.prompt_ids;
        for (int t : prompt)
          if (t >= config.vocab)
            bad_request("prompt",
                        fmt::format("token id {} is outside the vocabulary (size {})", t, config.vocab));
      } else {
        prompt = tok.encode_prompt(r.prompt, r.parse_special);
      }
    } catch (const Error& e) {
      bad_request(input_field, e.what());
    }
    const int prompt_len = static_cast<int>(prompt.size());
    if (prompt_len == 0) bad_request(input_field, "the prompt is empty: it encodes to no tokens");
    const int context = config.max_position;
    if (prompt_len >= context)
      throw ApiError(400,
                     fmt::format("This model's maximum context length is {} tokens; the prompt has {}",
                                 context, prompt_len),
                     input_field, "context_length_exceeded");
    int max_tokens = std::min(options.limits.default_max_tokens, context - prompt_len);
    if (r.max_tokens) {
      if (static_cast<int64_t>(prompt_len) + *r.max_tokens > context)
        throw ApiError(
            400,
            fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                        "tokens ({} in the prompt, {} in the completion)",
                        context, static_cast<int64_t>(prompt_len) + *r.max_tokens, prompt_len, *r.max_tokens),
            r.max_tokens_field, "context_length_exceeded");
      max_tokens = *r.max_tokens;
    }
    const kv::BudgetSpec spec = r.kv.budget;
    try {
      spec.check_prompt(prompt_len);
    } catch (const Error& e) {
      bad_request("kv.long_prompt", e.what());
    }
    if (r.n > options.engine.max_batch)
      bad_request("n", fmt::format("n = {} exceeds the server's batch of {} sequences", r.n,
                                   options.engine.max_batch));
    // The engine's policy table: a place held for the request until it ends (engine::kMaxPolicies at
    // once; a place no live request holds goes to the next new policy).
    engine::PolicyTable::Hold policy_hold;
    try {
      policy_hold = host.hold_policy(r.kv.policy);
    } catch (const engine::PolicyTableFull& e) {
      throw ApiError(400, e.what(), "kv.policy", "too_many_policies");
    } catch (const Error& e) {
      bad_request("kv.policy", e.what());
    }
    // What each choice reserves and whether the request could ever run: the engine's admission rule.
    engine::Reservation each;
    try {
      each = host.reservation(policy_hold, spec, prompt_len, max_tokens);
    } catch (const Error& e) {
      bad_request("kv.budget", e.what());
    }
    const int64_t per_choice = each.slots;
    const int64_t total = per_choice * r.n;
    if (!host.fits_when_idle(each, r.n))
      throw ApiError(
          400,
          fmt::format("this request can never fit: it reserves {} KV slots ({} choice(s) x {} = {}) "
                      "but the pool holds {} in pages of {}; lower max_tokens or n, or set kv.budget",
                      total, r.n, per_choice,
                      each.budget.bounded()
                          ? fmt::format("max(prompt {}, T {}) + r {}", prompt_len, each.budget.budget,
                                        each.budget.window)
                          : fmt::format("prompt {} + max_tokens {}", prompt_len, max_tokens),
                      options.engine.kv_slots, host.page_slots()),
          r.max_tokens ? r.max_tokens_field : std::string("max_tokens"), "kv_reservation_too_large");
    auto job = std::make_shared<Job>();
    job->kv = r.kv;
    job->policy = std::move(policy_hold);
    job->each = each;
    job->reserved_slots = total;
    const uint64_t base_seed =
        r.seed ? static_cast<uint64_t>(*r.seed) : std::random_device{}() * 0x100000001ull;
    for (int i = 0; i < r.n; ++i) {
      engine::GenerationRequest g;
      g.prompt = prompt;
      g.max_new_tokens = max_tokens;
      g.sampling = {r.temperature, r.top_p, r.top_k, base_seed};
      g.stop_ids = bundle.generation.eos_ids;
      g.ignore_eos = r.ignore_eos;
      g.stream_id = seeded_stream(base_seed, i);
      job->requests.push_back(std::move(g));
    }
    switch (host.enqueue(job)) {
      case EngineHost::Admission::Queued:
        break;
      case EngineHost::Admission::QueueFull: {
        const int64_t retry = 1 + host.queue_depth() / std::max(1, options.engine.max_batch);
        res.set_header("Retry-After", std::to_string(retry));
        throw ApiError(429,
                       fmt::format("the server is busy: {} requests already wait for KV memory; retry later",
                                   options.engine.max_queue),
                       "", "queue_full");
      }
      case EngineHost::Admission::Draining:
        throw ApiError(503, "the server is shutting down", "", "server_shutting_down");
    }

    ctx.endpoint = endpoint;
    ctx.id = (endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
    ctx.created = unix_now();
    ctx.model = options.model_name;
    ctx.stream = r.stream;
    ctx.include_usage = r.include_usage;
    ctx.prompt_tokens = prompt_len;
    ctx.kv = r.kv;
    ctx.stop = r.stop;
    ctx.stop_ids = bundle.generation.eos_ids;
    ctx.ignore_eos = r.ignore_eos;
    ctx.tokenizer = bundle.tokenizer.get();
    ctx.model_config = &config;
    ctx.kv_bytes_per_element = options.kv_bytes_per_element;
    // The body is produced while the engine runs: a chunked provider lets the handler notice a
    // client that left (a failed write, or the socket no longer writable) and free its sequences.
    res.set_chunked_content_provider(
        r.stream ? "text/event-stream" : "application/json",
        [this, job, ctx](size_t, httplib::DataSink& sink) {
          const bool ok = pump_completion(
              host, *job, ctx, [&sink](const std::string& s) { return sink.write(s.data(), s.size()); },
              [&sink] { return sink.is_writable(); });
          if (ok) sink.done();
          return ok;
        },
        [this, job](bool) { host.cancel_all(*job); });
    if (r.stream) res.set_header("Cache-Control", "no-cache");
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

Server::Server(const engine::ModelBundle& bundle, backend::Backend& backend, ServerOptions options)
    : impl_(std::make_unique<Impl>(bundle, backend, std::move(options))) {}

Server::~Server() = default;

const EngineHost& Server::engine_host() const { return impl_->host; }

int Server::bind() {
  auto& o = impl_->options;
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, o.host.c_str(), &v4) != 1 && inet_pton(AF_INET6, o.host.c_str(), &v6) != 1)
    fail("--host '{}' is not an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1)", o.host);
  if (o.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(o.host);
    if (impl_->port < 0) fail("cannot bind {}: the address is not one of this machine's", o.host);
  } else {
    if (!impl_->http.bind_to_port(o.host, o.port))
      fail("cannot bind {}:{}: the port is in use or the address is not one of this machine's", o.host,
           o.port);
    impl_->port = o.port;
  }
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of connections overflows the accept queue
  // and clients see resets. listen() again on the bound socket raises the backlog to the system's.
  if (impl_->listen_fd < 0 || ::listen(impl_->listen_fd, SOMAXCONN) != 0)
    fail("cannot enlarge the listen backlog of {}:{}", o.host, impl_->port);
  return impl_->port;
}

void install_server_signal_handlers() {
  open_stop_pipe();
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void Server::request_stop() {
  open_stop_pipe();
  on_stop_signal(0);  // 0: asked for, not a signal
}

int Server::serve_until_signal() {
  open_stop_pipe();
  std::thread listener([this] { impl_->http.listen_after_bind(); });
  char c = 0;
  while (read(stop_pipe[0], &c, 1) != 1) {
    if (errno != EINTR) fail("reading the signal pipe: {}", std::strerror(errno));
  }
  const int sig = c;
  const auto timeout = std::chrono::seconds(impl_->options.drain_timeout_s);
  fmt::print(stderr, "kvdice serve: {}, draining (up to {} s)\n",
             sig == SIGINT ? "SIGINT received" : sig == SIGTERM ? "SIGTERM received" : "stop requested", impl_->options.drain_timeout_s);
  const bool clean = impl_->host.drain(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  // Let handler threads finish writing what the engine produced before the sockets close.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  impl_->http.stop();
  listener.join();
  fmt::print(stderr, "kvdice serve: {}\n",
             clean ? "drained, exiting" : "drain timeout: running requests were cut");
  return 0;
}

}  // namespace kvdice::server
