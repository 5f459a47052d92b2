#include "server/completion_response.h"

#include <algorithm>
#include <optional>

#include "engine/run_summary.h"
#include "server/api_error.h"
#include "server/text_stream.h"

namespace kvdice::server {
namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// One choice's text: tokens -> UTF-8 pieces -> stop strings -> reasoning split.
struct ChoiceText {
  ChoiceText(const ResponseContext& ctx)
      : ctx(ctx), decoder(*ctx.tokenizer), stops(ctx.stop), think(ctx.think_opened) {}
  const ResponseContext& ctx;
  tokenizer::StreamDecoder decoder;
  StopMatcher stops;
  ThinkSplitter think;
  size_t consumed = 0;  // tokens taken from the job
  bool done = false;
  std::string finish_reason;
  SplitText total;  // everything emitted so far

  SplitText route(const std::string& text) {
    if (!ctx.reasoning) return {"", text};
    return think.push(text);
  }
  // New text from the tokens after `consumed`; a trailing stop id of a finished sequence is hidden.
  SplitText feed(const std::vector<int>& tokens, bool finished) {
    std::string text;
    for (size_t k = 0; k < tokens.size() && !stops.stopped(); ++k, ++consumed) {
      const int t = tokens[k];
      const bool last = k + 1 == tokens.size();
      const bool eos = std::find(ctx.stop_ids.begin(), ctx.stop_ids.end(), t) != ctx.stop_ids.end();
      if (eos && !ctx.ignore_eos && last && finished) continue;
      if (ctx.tokenizer->is_special(t)) continue;  // as skip_special_tokens=True does
      text += stops.push(decoder.push(t));
    }
    SplitText out = route(text);
    if (stops.stopped() || finished) {
      std::string tail = stops.stopped() ? "" : stops.push(decoder.flush()) + stops.flush();
      SplitText rest = route(tail);
      SplitText fl = ctx.reasoning ? think.flush() : SplitText{};
      out.reasoning += rest.reasoning + fl.reasoning;
      out.content += rest.content + fl.content;
    }
    total.reasoning += out.reasoning;
    total.content += out.content;
    return out;
  }
};

// Peak slots and rounds a sequence reached after `generated` tokens, by BudgetSpec's trigger
// rule; used for choices that ended before the engine reported their statistics.
engine::SequenceStats trace_stats(const kv::BudgetSpec& spec, int prompt_len, int generated) {
  engine::SequenceStats s;
  s.prompt_tokens = prompt_len;
  s.generated_tokens = generated;
  int len = prompt_len;
  s.peak_resident_slots = len;
  for (int step = 1; step < generated; ++step) {
    len++;
    s.peak_resident_slots = std::max(s.peak_resident_slots, len);
    if (spec.should_evict(len)) {
      len = spec.budget;
      s.eviction_rounds++;
    }
  }
  s.final_resident_slots = len;
  return s;
}

Json usage_json(const ResponseContext& ctx, const Job& job, const std::vector<ChoiceText>& texts) {
  int64_t completion = 0, peak_slots = 0, peak_bytes = 0, rounds = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const ChoiceProgress& c = job.choices[i];
    engine::SequenceStats stats =
        c.result ? c.result->stats
                 : trace_stats(ctx.kv.budget, ctx.prompt_tokens, static_cast<int>(texts[i].consumed));
    // A choice cut by a stop string counts the tokens up to it, not what the engine ran on.
    if (!c.result || texts[i].finish_reason == "stop_string") {
      stats = trace_stats(ctx.kv.budget, ctx.prompt_tokens, static_cast<int>(texts[i].consumed));
    }
    completion += stats.generated_tokens;
    rounds += stats.eviction_rounds;
    const auto fp = engine::kv_footprint(*ctx.model_config, stats, ctx.kv_bytes_per_element);
    peak_slots = std::max<int64_t>(peak_slots, fp.peak_slots);
    peak_bytes += fp.peak_bytes;
  }
  return Json{{"prompt_tokens", ctx.prompt_tokens},
              {"completion_tokens", completion},
              {"total_tokens", ctx.prompt_tokens + completion},
              {"kv",
               {{"policy", ctx.kv.policy},
                {"budget", ctx.kv.budget.budget},
                {"window", ctx.kv.budget.window},
                {"reserved_slots", job.reserved_slots},
                {"peak_slots", peak_slots},
                {"peak_bytes", peak_bytes},
                {"eviction_rounds", rounds}}}};
}

std::string public_finish(const std::string& reason) { return reason == "stop_string" ? "stop" : reason; }

Json chunk_base(const ResponseContext& ctx) {
  return Json{{"id", ctx.id},
              {"object", ctx.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion"},
              {"created", ctx.created},
              {"model", ctx.model},
              {"choices", Json::array()}};
}

Json delta_choice(const ResponseContext& ctx, size_t index, const SplitText& delta, bool first,
                  const std::optional<std::string>& finish) {
  Json choice{{"index", index}, {"finish_reason", finish ? Json(public_finish(*finish)) : Json(nullptr)}};
  if (ctx.endpoint == Endpoint::Chat) {
    Json d = Json::object();
    if (first) d["role"] = "assistant";
    if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty() || (first && delta.reasoning.empty())) d["content"] = delta.content;
    choice["delta"] = d;
    choice["logprobs"] = nullptr;
  } else {
    choice["text"] = delta.content;
    choice["logprobs"] = nullptr;
  }
  return choice;
}

}  // namespace

bool pump_completion(EngineHost& host, Job& job, const ResponseContext& ctx,
                     const std::function<bool(const std::string&)>& write,
                     const std::function<bool()>& alive) {
  const size_t n = job.requests.size();
  std::vector<ChoiceText> texts;
  texts.reserve(n);
  for (size_t i = 0; i < n; ++i) texts.emplace_back(ctx);
  std::vector<bool> started(n, false);
  auto send = [&](const Json& j) { return write("data: " + dump(j) + "\n\n"); };
  std::string error;
  bool refused = false;  // the engine refused the settings: the client's error
  std::string refusal_code;

  while (true) {
    std::vector<std::pair<std::vector<int>, bool>> fresh(n);  // tokens snapshot, finished
    {
      std::unique_lock lock(job.mutex);
      auto progressed = [&] {
        if (!job.error.empty()) return true;
        for (size_t i = 0; i < n; ++i) {
          if (texts[i].done) continue;
          if (job.choices[i].finished || job.choices[i].tokens.size() > texts[i].consumed) return true;
        }
        return false;
      };
      job.cv.wait_for(lock, std::chrono::milliseconds(50), progressed);
      error = job.error;
      refused = job.refused;
      refusal_code = job.refusal_code;
      for (size_t i = 0; i < n; ++i) {
        const auto& all = job.choices[i].tokens;
        const size_t from = std::min(texts[i].consumed, all.size());
        fresh[i] = {std::vector<int>(all.begin() + from, all.end()), job.choices[i].finished};
      }
    }
    if (!alive()) {
      host.cancel_all(job);
      return false;
    }
    for (size_t i = 0; i < n; ++i) {
      ChoiceText& t = texts[i];
      if (t.done) continue;
      const auto& [tokens, finished] = fresh[i];
      // Read finish state only once every token is consumed, so no text is lost.
      SplitText delta = t.feed(tokens, finished);
      std::optional<std::string> finish;
      if (t.stops.stopped()) {
        finish = "stop_string";
        host.cancel(job, static_cast<int>(i));
      } else if (finished) {
        std::lock_guard lock(job.mutex);
        const auto& r = job.choices[i].result;
        finish = r ? std::string(engine::finish_reason_name(r->finish)) : "abort";
      }
      if (finish) {
        t.done = true;
        t.finish_reason = *finish;
      }
      if (ctx.stream && error.empty() &&
          (!delta.content.empty() || !delta.reasoning.empty() || finish || !started[i])) {
        Json chunk = chunk_base(ctx);
        chunk["choices"].push_back(delta_choice(ctx, i, delta, !started[i], finish));
        if (ctx.include_usage) chunk["usage"] = nullptr;
        started[i] = true;
        if (!send(chunk)) {
          host.cancel_all(job);
          return false;
        }
      }
    }
    if (!error.empty()) {
      host.cancel_all(job);
      const Json err = refused ? error_json(400, error, "", refusal_code)
                               : error_json(503, error, "", "server_shutting_down");
      return ctx.stream ? send(err) && write("data: [DONE]\n\n") : write(dump(err));
    }
    if (!std::all_of(texts.begin(), texts.end(), [](const ChoiceText& t) { return t.done; })) continue;

    // Every choice is done. Statistics of choices the engine is still finishing are traced.
    Json usage;
    {
      std::lock_guard lock(job.mutex);
      usage = usage_json(ctx, job, texts);
    }
    if (ctx.stream) {
      if (ctx.include_usage) {
        Json chunk = chunk_base(ctx);
        chunk["usage"] = usage;
        if (!send(chunk)) return false;
      }
      return write("data: [DONE]\n\n");
    }
    Json body{{"id", ctx.id},
              {"object", ctx.endpoint == Endpoint::Chat ? "chat.completion" : "text_completion"},
              {"created", ctx.created},
              {"model", ctx.model},
              {"choices", Json::array()},
              {"usage", usage}};
    for (size_t i = 0; i < n; ++i) {
      Json choice{
          {"index", i}, {"finish_reason", public_finish(texts[i].finish_reason)}, {"logprobs", nullptr}};
      if (ctx.endpoint == Endpoint::Chat) {
        Json message{{"role", "assistant"}, {"content", texts[i].total.content}};
        if (ctx.reasoning) message["reasoning_content"] = texts[i].total.reasoning;
        choice["message"] = message;
      } else {
        choice["text"] = texts[i].total.content;
      }
      body["choices"].push_back(choice);
    }
    return write(dump(body));
  }
}

}  // namespace kvdice::server
