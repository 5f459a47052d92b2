// `kvdice serve`: the OpenAI-compatible HTTP server (src/server) over one model.
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "engine/model_bundle.h"
#include "kv/pool_sizing.h"
#include "policy/eviction_policy.h"
#include "server/server.h"

namespace kvdice::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::string model_name;
  server::ServerOptions server;
  std::string long_prompt = "warn";
  backend::BackendOptions backend;
  int max_batch = 0;  // 0 = as the backend suits: memory bounds the batch on CUDA
  std::vector<std::string> signals_for;  // policies whose signals are recorded besides the default's
};

// Rows of the decode batch when --max-batch is not given: on CUDA the KV pool, not the batch, is the
// limit; on the CPU a step of many rows is slow, so fewer run at once.
constexpr int kCudaDefaultMaxBatch = 1024;
constexpr int kCpuDefaultMaxBatch = 64;

std::unique_ptr<backend::Backend> make_server_backend(const ServeOptions& o) {
  return backend::make_backend(o.backend);
}

void run_serve(ServeOptions& o) {
  server::ServerOptions& s = o.server;
  if (o.long_prompt != "warn" && o.long_prompt != "error")
    fail("--long-prompt must be warn or error (got '{}')", o.long_prompt);
  s.limits.kv.budget.long_prompt = o.long_prompt == "error" ? kv::LongPromptRule::Error : kv::LongPromptRule::Warn;
  if (policy::make_policy(s.limits.kv.policy, "--policy")->evicts()) {
    if (s.limits.kv.budget.budget <= 0) s.limits.kv.budget.budget = kv::kDefaultServeBudget;  // docs/server.md
    s.limits.kv.budget.validate();
  } else {
    s.limits.kv.budget.budget = 0;
  }
  s.model_name = o.model_name.empty() ? o.model : o.model_name;
  for (const std::string& spec : o.signals_for)
    s.engine.signals |= policy::make_policy(spec, "--signals-for")->needs();

  server::install_server_signal_handlers();  // SIGINT/SIGTERM drain from here on, whichever thread takes them
  const auto path = resolve_model_argument(o.model);
  auto backend = make_server_backend(o);
  s.engine.max_batch = o.max_batch > 0 ? o.max_batch : backend->is_cpu() ? kCpuDefaultMaxBatch : kCudaDefaultMaxBatch;
  engine::ModelBundle bundle = engine::load_model_bundle(path, {backend->block_weight_types()});
  server::Server srv(bundle, *backend, s);
  const int port = srv.bind();
  // One line on stdout, flushed, so scripts and tests can wait for it.
  const server::EngineHost& host = srv.engine_host();
  const engine::MemoryPlan& plan = host.memory_plan();
  const int64_t budgeted = int64_t{s.limits.kv.budget.budget} + s.limits.kv.budget.window;
  std::vector<std::string> signals = host.recorded_signals().names();
  if (signals.empty()) signals.emplace_back("none");
  fmt::print(
      "kvdice serve: listening on http://{}:{} model '{}' ({}), backend {}, default kv {} T={} r={}; "
      "KV pool {} slots ({:.2f} GiB, {}), max batch {}: {} sequences of T + r = {} fit, {} of the full "
      "context {}; signals recorded: {}\n",
      s.host, port, s.model_name, bundle.source, backend->name(), s.limits.kv.policy, s.limits.kv.budget.budget,
      s.limits.kv.budget.window, host.options().kv_slots, plan.kv_pool_bytes / (1024.0 * 1024.0 * 1024.0),
      plan.kv_pool_rule, s.engine.max_batch,
      s.limits.kv.budget.bounded() ? host.sequences_that_fit(budgeted) : 0, budgeted,
      host.sequences_that_fit(plan.max_context), plan.max_context, fmt::join(signals, ", "));
  std::fflush(stdout);
  const int code = srv.serve_until_signal();
  if (code != 0) fail("server stopped with code {}", code);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  server::ServerOptions& s = o->server;
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server (chat/completions, completions, SSE) with per-request kv settings");
  cmd->add_option("--model,-m", o->model, "HF checkpoint directory, .gguf file, or a known model name")
      ->required();
  cmd->add_option("--served-model-name", o->model_name,
                  "Model id clients send as \"model\" (default: --model)");
  cmd->add_option("--host", s.host, "IP address to bind (default 127.0.0.1: this machine only)");
  add_int_option(cmd, "--port", s.port, 0, 65535, "Port (0 = any free port; the chosen one is printed)");
  cmd->add_option("--api-key", s.api_key, "Require 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--policy", s.limits.kv.policy,
                  "Default eviction policy (a request's kv.policy overrides)");
  cmd->add_option("--signals-for", o->signals_for,
                  "Also record the signals these policies read (query ring, value ranges, attention mass), so "
                  "that requests may choose them; the default policy's are always recorded")
      ->expected(1, -1);
  add_int_option(cmd, "--budget,-T", s.limits.kv.budget.budget, 0, kMaxTokens,
                 fmt::format("Default KV budget T (kv.budget overrides; default {})", kv::kDefaultServeBudget));
  add_int_option(cmd, "--window,-r", s.limits.kv.budget.window, 1, kMaxTokens,
                 "Default recency window r (kv.window overrides)");
  cmd->add_option("--long-prompt", o->long_prompt, "Default for a prompt longer than T - r: warn or error");
  add_int_option(cmd, "--max-tokens", s.limits.default_max_tokens, 1, kMaxTokens,
                 "max_tokens when a request gives none (capped by the context length)");
  add_int_option(cmd, "--max-n", s.limits.max_n, 1, 4096, "Largest n a request may ask for");
  add_int_option(cmd, "--max-batch", o->max_batch, 1, 4096,
                 fmt::format("Sequences decoded together at most (default {} on CUDA, where the KV pool "
                             "bounds the batch; {} on the CPU)",
                             kCudaDefaultMaxBatch, kCpuDefaultMaxBatch));
  add_int_option(cmd, "--max-queue", s.engine.max_queue, 1, 1 << 20,
                 "Requests that may wait for KV memory; beyond: HTTP 429 with Retry-After");
  add_int_option(cmd, "--http-threads", s.http_threads, 1, server::kMaxHttpThreads,
                 "Connections served at once (threads start on demand); more wait in the listen backlog");
  add_int_option(cmd, "--keep-alive", s.keep_alive_s, 0, 3600,
                 "Seconds an idle keep-alive connection stays open");
  add_kv_pool_flags(cmd, s.engine.pool);  // a request that can never fit the pool gets HTTP 400
  add_seed_option(cmd, "--seed", s.engine.eviction_seed, "Seed of the eviction streams");
  cmd->add_option("--chat-template", s.chat_template, "Override the detected chat template");
  cmd->add_option("--max-body-bytes", s.max_body_bytes,
                  "Largest request body, chunked or not (HTTP 413 beyond)")
      ->transform(integer_in(1, size_t{1} << 32));
  add_int_option(cmd, "--drain-timeout", s.drain_timeout_s, 0, 86400,
                 "Seconds SIGINT/SIGTERM waits for running requests before cutting them");
  add_backend_flags(cmd, o->backend);
  cmd->footer(
      "Raw prompts (/v1/completions): special-token text such as <|im_end|> is parsed as special tokens by "
      "default, "
      "as transformers does; send \"special_tokens\": \"text\" to encode it as plain text.");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace kvdice::cli
