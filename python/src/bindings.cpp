// kvdice._kvdice: the Python extension over libkvdice. One job: expose the engine's step loop, the
// tokenizer and a policy's keep rule with numbers in and NumPy arrays out; the Python package
// (python/kvdice/__init__.py) builds the user-facing API (LLM, KVConfig, SamplingParams) on it.
// Every kvdice::Error becomes kvdice.Error (a ValueError) with the same message. Steps run without
// the GIL; Python drives the loop between steps, so Ctrl-C lands between two steps and cancels there.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "backend/backend.h"
#include "eval_bindings.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "engine/run_summary.h"
#include "kv/eviction_round.h"
#include "model/model_store.h"
#include "policy/eviction_policy.h"
#include "tokenizer/tokenizer.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvdice::python {
namespace {

// A NumPy array that takes over `values` without copying them (the capsule frees the vector).
template <class T>
nb::ndarray<nb::numpy, T> numpy_from(std::vector<T>&& values, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, owner);
}

// One request as Python fills it in (the fields of GenerationRequest plus its KV settings).
struct Request {
  std::vector<int> prompt;
  int max_new_tokens = 256;
  std::string policy = "full";
  int budget = 0;
  int window = 64;
  std::string long_prompt = "warn";
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<int> forced_tokens;
  std::optional<uint64_t> stream_id;
  bool retention_log = false;  // keep each round's kept positions for the result
};

struct TokenEvent {
  uint64_t id;
  int token;
  std::string text;  // the UTF-8 text this token completes (stop ids print nothing)
  bool finished;
};

// Generated text may end inside a UTF-8 character (a stream cut at a length): invalid bytes become U+FFFD.
nb::object py_text(const std::string& text) {
  return nb::steal(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
}

// The engine's JSON for a result (stats, KV footprint) as a Python dict, through json.loads.
nb::object json_to_python(const Json& j) {
  return nb::module_::import_("json").attr("loads")(j.dump(-1, ' ', false, Json::error_handler_t::replace));
}

class EngineHandle {
 public:
  EngineHandle(const std::string& model, const std::string& home, const std::string& backend_name, int threads,
               int device, int max_batch, int max_context, int64_t kv_pool_bytes, uint64_t eviction_seed) {
    if (max_batch < 1) fail("max_batch must be >= 1, got {}", max_batch);
    if (max_context < 0) fail("max_context must be >= 0 (0 = the model's maximum position), got {}", max_context);
    if (kv_pool_bytes < 0) fail("kv_pool_bytes must be >= 0 (0 = sized by the backend), got {}", kv_pool_bytes);
    bundle_ = engine::load_model_bundle(model::resolve_model_path(model, home));
    backend_ = backend::make_backend({backend_name, threads, device});
    config_.max_batch = max_batch;
    config_.max_context = max_context;
    config_.kv_pool_bytes = kv_pool_bytes;
    config_.eviction_seed = eviction_seed;
  }

  // A prompt (BOS in front where the tokenizer adds one, or the chat template's rendering), or with
  // `continuation` text that follows one (never a BOS).
  std::vector<int> encode(const std::string& text, bool chat, const std::string& system, bool thinking,
                          const std::string& chat_template, bool parse_special, bool continuation) const {
    if (continuation) {
      if (chat) fail("a continuation is encoded as plain text, not through the chat template");
      return bundle_.tokenizer->encode(text, parse_special);
    }
    if (!chat) return engine::encode_raw_prompt(bundle_, text, parse_special);
    const auto kind = engine::resolve_chat_template(bundle_, chat_template);
    if (!thinking && !tokenizer::has_thinking_switch(kind))
      fail("thinking=False: the {} chat template has no thinking switch (only qwen3 does)",
           tokenizer::chat_template_name(kind));
    return engine::encode_chat_prompt(bundle_, kind, text, system, thinking);
  }
  std::string decode(const std::vector<int>& ids) const {
    const int vocab = bundle_.model->config().vocab;
    for (int t : ids)
      if (t < 0 || t >= vocab) fail("token id {} is outside the vocabulary (size {})", t, vocab);
    return bundle_.tokenizer->decode(ids);
  }

  // Validates and submits every request, or none: a bad one leaves the engine as it was.
  std::vector<uint64_t> submit(const std::vector<Request>& requests) {
    if (requests.empty()) fail("no prompt: generate needs at least one");
    if (engine_ && !engine_->idle()) fail("a generate is still running on this LLM: finish or close its stream first");
    std::vector<engine::GenerationRequest> built;
    for (const Request& r : requests) built.push_back(build(r));
    ensure_engine(requests);
    std::vector<uint64_t> ids;
    try {
      for (size_t i = 0; i < built.size(); ++i) {
        ids.push_back(engine_->submit(std::move(built[i])));
        decoders_.emplace(ids.back(), tokenizer::StreamDecoder(*bundle_.tokenizer));
        stop_ids_[ids.back()] = requests[i].ignore_eos ? std::vector<int>{} : bundle_.generation.eos_ids;
        if (requests[i].retention_log) retained_[ids.back()];
      }
    } catch (...) {
      for (uint64_t id : ids) engine_->cancel(id);
      drain();
      throw;
    }
    return ids;
  }

  // One scheduler iteration without the GIL; the tokens it produced.
  std::vector<TokenEvent> step() {
    if (!engine_) return {};
    std::vector<TokenEvent> events;
    {
      nb::gil_scoped_release release;
      engine_->set_token_callback([&](const engine::TokenEvent& ev) {
        auto& decoder = decoders_.at(ev.id);
        const auto& stops = stop_ids_.at(ev.id);
        std::string text;
        if (std::find(stops.begin(), stops.end(), ev.token) == stops.end()) text = decoder.push(ev.token);
        if (ev.finished) text += decoder.flush();
        events.push_back({ev.id, ev.token, std::move(text), ev.finished});
      });
      engine_->step();
      engine_->set_token_callback({});
    }
    return events;
  }
  bool idle() const { return !engine_ || engine_->idle(); }
  bool cancel(uint64_t id) { return engine_ && engine_->cancel(id); }
  // Cancels everything and steps until the engine is empty (what an interrupted generate leaves).
  void cancel_all() {
    if (!engine_) return;
    for (const auto& [id, decoder] : decoders_) engine_->cancel(id);
    drain();
  }

  // Finished results as dicts: id, prompt, tokens, text, finish, stats (the CLI's JSON record),
  // forced log-probabilities and the retention log as NumPy arrays.
  std::vector<nb::dict> take_finished() {
    std::vector<nb::dict> out;
    if (!engine_) return out;
    auto results = engine_->take_finished();
    std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (auto& r : results) {
      std::vector<int> visible = r.tokens;
      if (r.finish == engine::FinishReason::Stop && !visible.empty()) visible.pop_back();
      const std::string text = bundle_.tokenizer->decode(visible);
      Json record = engine::result_json(r, text, bundle_.model->config(), engine_->kv_bytes_per_element());
      nb::dict d;
      d["id"] = r.id;
      d["text"] = py_text(text);
      d["finish"] = std::string(engine::finish_reason_name(r.finish));
      d["stats"] = json_to_python(record["stats"]);
      const size_t n_prompt = r.prompt.size(), n_tokens = r.tokens.size();
      d["prompt_ids"] = numpy_from(std::move(r.prompt), {n_prompt});
      d["token_ids"] = numpy_from(std::move(r.tokens), {n_tokens});
      if (!r.forced_logprobs.empty()) {
        const size_t n = r.forced_logprobs.size();
        d["forced_logprobs"] = numpy_from(std::move(r.forced_logprobs), {n});
        d["forced_is_argmax"] = numpy_from(std::move(r.forced_is_argmax), {n});
      }
      if (auto it = retained_.find(r.id); it != retained_.end()) {
        d["retention"] = retention_arrays(it->second);
        retained_.erase(it);
      }
      decoders_.erase(r.id);
      stop_ids_.erase(r.id);
      out.push_back(std::move(d));
    }
    return out;
  }

  nb::dict describe() const {
    const auto& c = bundle_.model->config();
    nb::dict d;
    d["source"] = bundle_.source;
    d["format"] = bundle_.format;
    d["backend"] = std::string(backend_->name());
    d["layers"] = c.n_layers;
    d["kv_heads"] = c.n_kv_heads;
    d["head_dim"] = c.head_dim;
    d["vocab"] = c.vocab;
    d["eos_ids"] = bundle_.generation.eos_ids;
    return d;
  }

 private:
  engine::GenerationRequest build(const Request& r) const {
    if (r.long_prompt != "warn" && r.long_prompt != "error")
      fail("long_prompt must be 'warn' or 'error', got '{}'", r.long_prompt);
    engine::GenerationRequest g;
    g.prompt = r.prompt;
    g.max_new_tokens = r.max_new_tokens;
    g.sampling = {r.temperature, r.top_p, r.top_k, r.seed};
    g.sampling.validate();
    g.stop_ids = bundle_.generation.eos_ids;
    g.ignore_eos = r.ignore_eos;
    g.forced_tokens = r.forced_tokens;
    g.stream_id = r.stream_id;
    kv::BudgetSpec budget{r.budget, r.window,
                          r.long_prompt == "error" ? kv::LongPromptRule::Error : kv::LongPromptRule::Warn};
    auto policy = policy::make_policy(r.policy);  // names the policy or option that is wrong
    if (policy->evicts()) {
      if (r.budget <= 0) fail("policy '{}' needs a budget T (T > r, T a multiple of r = window)", r.policy);
      budget.validate();
    } else if (r.retention_log) {
      fail("retention_log has nothing to log with policy '{}', which never evicts", r.policy);
    }
    g.kv = engine::KvSettings{r.policy, budget};
    return g;
  }

  // The pool records the signals its engine was asked for, and weights are uploaded once per engine, so
  // the engine is kept while it records what the batch's policies read and rebuilt (recording all of
  // them, the first request's settings as its default) when it does not.
  void ensure_engine(const std::vector<Request>& requests) {
    policy::SignalNeeds wanted;
    int widest_window = 0;  // the widest r of a request reading window queries: the query ring's width
    for (const Request& r : requests) {
      const auto needs = policy::make_policy(r.policy)->needs();
      wanted |= needs;
      if (needs.window_queries) widest_window = std::max(widest_window, r.window);
    }
    if (engine_ && engine_->recorded_signals().covers(wanted) && engine_->memory_plan().query_window >= widest_window)
      return;
    engine_.reset();
    const Request& first = requests.front();
    engine::EngineConfig config = config_;
    config.kv.policy = first.policy;
    config.kv.budget = {first.budget, first.window, kv::LongPromptRule::Warn};
    config.signals = wanted;
    config.query_window = widest_window;
    engine_ = std::make_unique<engine::Engine>(*bundle_.model, *backend_, config);
    engine_->set_round_observer([this](uint64_t id, const kv::RoundRecord& record) {
      if (auto it = retained_.find(id); it != retained_.end()) it->second.push_back(record);
    });
  }

  void drain() {
    while (!engine_->idle()) engine_->step();
    engine_->take_finished();
    decoders_.clear();
    stop_ids_.clear();
    retained_.clear();
  }

  // [rounds, layers, kv_heads, T] kept positions (every head keeps T after a round) and each round's
  // number and token count.
  static nb::dict retention_arrays(const std::vector<kv::RoundRecord>& rounds) {
    size_t layers = 0, heads = 0, kept = 0;
    if (!rounds.empty() && !rounds[0].kept_positions.empty()) {
      layers = rounds[0].kept_positions.size();
      heads = rounds[0].kept_positions[0].size();
      kept = heads ? rounds[0].kept_positions[0][0].size() : 0;
    }
    std::vector<int32_t> positions;
    positions.reserve(rounds.size() * layers * heads * kept);
    std::vector<uint32_t> numbers;
    std::vector<int64_t> at_token;
    for (const auto& r : rounds) {
      numbers.push_back(r.round);
      at_token.push_back(r.at_token);
      for (const auto& layer : r.kept_positions)
        for (const auto& head : layer) {
          KVDICE_CHECK(head.size() == kept, "round {} kept {} slots in one head, {} in another", r.round,
                       head.size(), kept);
          positions.insert(positions.end(), head.begin(), head.end());
        }
    }
    nb::dict d;
    const size_t n = rounds.size();
    d["kept_positions"] = numpy_from(std::move(positions), {n, layers, heads, kept});
    d["round"] = numpy_from(std::move(numbers), {n});
    d["at_token"] = numpy_from(std::move(at_token), {n});
    return d;
  }

  engine::ModelBundle bundle_;
  std::unique_ptr<backend::Backend> backend_;
  engine::EngineConfig config_;
  std::unique_ptr<engine::Engine> engine_;
  std::map<uint64_t, tokenizer::StreamDecoder> decoders_;
  std::map<uint64_t, std::vector<int>> stop_ids_;
  std::map<uint64_t, std::vector<kv::RoundRecord>> retained_;
};

using FloatArray = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

// A policy's keep rule for one (layer, KV head) of one round, outside the engine: the candidates'
// positions (and the signals the policy reads) in, one keep flag per candidate out.
nb::ndarray<nb::numpy, bool> policy_keep(const std::string& spec, nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> positions,
                                         int keep, int n_protected, std::optional<FloatArray> keys,
                                         std::optional<FloatArray> window_queries, std::optional<FloatArray> value_range,
                                         std::optional<FloatArray> attention_mass,
                                         std::optional<nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>> round_score,
                                         uint64_t seed, uint64_t sequence_id, uint32_t round, int budget,
                                         std::optional<int64_t> appended, int layer, int kv_head) {
  auto policy = policy::make_policy(spec);
  if (!policy->evicts()) fail("policy '{}' never evicts: it has no keep rule", policy->name());
  const int n = static_cast<int>(positions.shape(0));
  if (keep < 0 || keep > n) fail("keep must be in [0, {}] (the number of candidates), got {}", n, keep);
  if (n_protected < 0 || n_protected > keep) fail("n_protected must be in [0, keep = {}], got {}", keep, n_protected);
  policy::SelectionInput in;
  in.layer = layer;
  in.kv_head = kv_head;
  in.n_candidates = n;
  in.keep = keep;
  in.n_protected = policy->protects_prompt() ? n_protected : 0;
  in.positions = {positions.data(), static_cast<size_t>(n)};
  in.key = philox_key(seed, sequence_id, RngDomain::Eviction);
  in.round = round;
  in.budget = budget;
  int32_t newest = -1;
  for (int i = 0; i < n; ++i) newest = std::max(newest, positions.data()[i]);
  in.appended = appended.value_or(int64_t{newest} + 1);
  const auto needs = policy->needs();
  if (needs.window_queries) {
    if (!keys || !window_queries)
      fail("policy '{}' reads the candidates' keys [n, head_dim] and the window queries [group, n_queries, head_dim]",
           policy->name());
    if (keys->ndim() != 2 || keys->shape(0) != static_cast<size_t>(n))
      fail("keys must be [{}, head_dim] (one row per candidate), got {} dimensions", n, keys->ndim());
    if (window_queries->ndim() != 3 || window_queries->shape(2) != keys->shape(1))
      fail("window_queries must be [group, n_queries, head_dim = {}]", keys->shape(1));
    in.head_dim = static_cast<int>(keys->shape(1));
    in.group = static_cast<int>(window_queries->shape(0));
    in.n_queries = static_cast<int>(window_queries->shape(1));
    in.keys = {keys->data(), keys->size()};
    in.window_queries = {window_queries->data(), window_queries->size()};
  }
  auto one_per_candidate = [&](const std::optional<FloatArray>& a, const char* name) -> std::span<const float> {
    if (!a) fail("policy '{}' reads {} (one value per candidate)", policy->name(), name);
    if (a->ndim() != 1 || a->shape(0) != static_cast<size_t>(n)) fail("{} must be [{}] (one per candidate)", name, n);
    return {a->data(), a->size()};
  };
  if (needs.value_ranges) in.value_range = one_per_candidate(value_range, "value_range");
  if (needs.accumulated_attention) in.attention_mass = one_per_candidate(attention_mass, "attention_mass");
  if (policy->scores_whole_round()) {
    if (!round_score || round_score->shape(0) != static_cast<size_t>(n))
      fail("policy '{}' scores every layer at once: pass round_score [{}], this head's row of its round score",
           policy->name(), n);
    in.round_score = {round_score->data(), static_cast<size_t>(n)};
  }
  std::vector<uint8_t> flags(static_cast<size_t>(n), 0);
  {
    nb::gil_scoped_release release;
    policy->select(in, flags);
  }
  bool* out = new bool[static_cast<size_t>(n)];
  for (int i = 0; i < n; ++i) out[i] = flags[static_cast<size_t>(i)] != 0;
  nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<bool*>(p); });
  return nb::ndarray<nb::numpy, bool>(out, {static_cast<size_t>(n)}, owner);
}

}  // namespace
}  // namespace kvdice::python

NB_MODULE(_kvdice, m) {
  using namespace kvdice::python;
  m.doc() = "kvdice's engine, tokenizer and policies (use the kvdice package, not this module)";
  nb::exception<kvdice::Error>(m, "Error", PyExc_ValueError);

  nb::class_<Request>(m, "Request")
      .def(nb::init<>())
      .def_rw("prompt", &Request::prompt)
      .def_rw("max_new_tokens", &Request::max_new_tokens)
      .def_rw("policy", &Request::policy)
      .def_rw("budget", &Request::budget)
      .def_rw("window", &Request::window)
      .def_rw("long_prompt", &Request::long_prompt)
      .def_rw("temperature", &Request::temperature)
      .def_rw("top_p", &Request::top_p)
      .def_rw("top_k", &Request::top_k)
      .def_rw("seed", &Request::seed)
      .def_rw("ignore_eos", &Request::ignore_eos)
      .def_rw("forced_tokens", &Request::forced_tokens)
      .def_rw("stream_id", &Request::stream_id)
      .def_rw("retention_log", &Request::retention_log);

  nb::class_<TokenEvent>(m, "TokenEvent")
      .def_ro("id", &TokenEvent::id)
      .def_ro("token", &TokenEvent::token)
      .def_prop_ro("text", [](const TokenEvent& e) { return py_text(e.text); })
      .def_ro("finished", &TokenEvent::finished);

  nb::class_<EngineHandle>(m, "Engine")
      .def(nb::init<const std::string&, const std::string&, const std::string&, int, int, int, int, int64_t, uint64_t>(),
           "model"_a, "home"_a, "backend"_a, "threads"_a, "device"_a, "max_batch"_a, "max_context"_a,
           "kv_pool_bytes"_a, "eviction_seed"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("encode", &EngineHandle::encode, "text"_a, "chat"_a, "system"_a, "thinking"_a, "chat_template"_a,
           "parse_special"_a, "continuation"_a)
      .def("decode", [](const EngineHandle& h, const std::vector<int>& ids) { return py_text(h.decode(ids)); }, "ids"_a)
      .def("submit", &EngineHandle::submit, "requests"_a)
      .def("step", &EngineHandle::step)
      .def("idle", &EngineHandle::idle)
      .def("cancel", &EngineHandle::cancel, "id"_a)
      .def("cancel_all", &EngineHandle::cancel_all, nb::call_guard<nb::gil_scoped_release>())
      .def("take_finished", &EngineHandle::take_finished)
      .def("describe", &EngineHandle::describe);

  m.def("policy_keep", &policy_keep, "spec"_a, "positions"_a, "keep"_a, "n_protected"_a, "keys"_a.none(),
        "window_queries"_a.none(), "value_range"_a.none(), "attention_mass"_a.none(), "round_score"_a.none(),
        "seed"_a, "sequence_id"_a, "round"_a, "budget"_a, "appended"_a.none(), "layer"_a, "kv_head"_a);
  m.def("policy_names", &kvdice::policy::policy_names);
  bind_eval(m);
  m.def("describe_policy", [](const std::string& spec) { return kvdice::policy::describe(*kvdice::policy::make_policy(spec)); });
}
