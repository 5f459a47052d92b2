// The OpenAI-compatible HTTP server (cpp-httplib): routes, authentication, request parsing,
// streaming as server-sent events, and the drain on SIGINT/SIGTERM. Generation itself runs on the
// EngineHost thread; handler threads only turn tokens into text and JSON.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "engine/model_bundle.h"
#include "server/engine_host.h"
#include "server/openai_request.h"

namespace kvdice::server {

// The --http-threads bound: far above any useful concurrency on one engine, far below the
// kernel's thread limit on a common machine.
inline constexpr int kMaxHttpThreads = 32768;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (printed at startup)
  std::string api_key;
  std::string model_name = "default";  // the id clients send as "model"
  std::string chat_template;           // override; empty = detected
  RequestLimits limits;
  HostOptions engine;
  size_t max_body_bytes = 8 << 20;  // however the body is framed (Content-Length or chunked)
  int http_threads = 2048;          // connections served at once; more wait in the listen backlog
  int keep_alive_s = 5;             // an idle keep-alive connection is closed after this
  int drain_timeout_s = 30;
  int kv_bytes_per_element = 4;  // K/V storage precision of the backend (fp32 on the CPU)
};

class Server {
 public:
  Server(const engine::ModelBundle& bundle, backend::Backend& backend, ServerOptions options);
  ~Server();
  // Binds (port 0 picks one) with a listen backlog of SOMAXCONN and returns the port; throws Error
  // when the address is not an IP address of this machine or the port is taken.
  int bind();
  // Serves until SIGINT or SIGTERM (after install_server_signal_handlers) or request_stop(), then
  // drains: no new requests, running ones finish within the drain timeout. Returns the exit code.
  int serve_until_signal();
  // Stops serve_until_signal() as a signal would, from any thread (a server run inside another program).
  void request_stop();
  // The engine host: its pool (memory plan, capacity) for the start-up line.
  const EngineHost& engine_host() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Makes SIGINT/SIGTERM, on whichever thread the kernel delivers them, wake serve_until_signal() to drain
// (a handler writing to a pipe); ignores SIGPIPE (a client gone mid-write). Call before serving.
void install_server_signal_handlers();

}  // namespace kvdice::server
