// latency: batch-1 decode at a short and a long context against the weights-only roofline (the rate
// if a step read nothing but the weights at the measured bandwidth).
#include "bench/protocols.h"
#include "core/error.h"

namespace kvdice::bench {

BenchOptions latency_load(const BenchOptions& options, int context) {
  BenchOptions one = options;
  one.requests = 1;
  one.prompt_len = context;
  return one;
}

Json run_latency(const BenchContext& ctx) {
  const BenchOptions& o = ctx.options;
  Json out;
  out["results"] = Json::array();
  LoadSpec last;
  for (const auto& [label, context] :
       {std::pair<std::string, int>{"short", o.short_context}, {"long", o.long_context}}) {
    LoadSpec spec = load_spec(latency_load(o, context), o.policy);
    const LoadResult result = run_load(ctx.model, ctx.backend, spec);
    Json metrics = result.metrics_json(ctx.bandwidth);
    const double roofline = ctx.bandwidth / static_cast<double>(result.weight_bytes_per_step);
    metrics["context"] = context;
    metrics["weights_only_roofline_tok_s"] = roofline;
    metrics["weights_only_roofline_fraction"] = metrics["output_tok_s_decode"].get<double>() / roofline;
    out["results"].push_back(Json{{"label", fmt::format("{} context {}", label, context)},
                                  {"metrics", metrics},
                                  {"validation", result.validation.to_json()}});
    last = spec;
  }
  out["parameters"] = load_parameters(last);
  out["parameters"].erase("prompt_len");
  out["parameters"]["short_context"] = o.short_context;
  out["parameters"]["long_context"] = o.long_context;
  return out;
}

}  // namespace kvdice::bench
