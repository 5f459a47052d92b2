#include "bench/budget_rule.h"

#include <algorithm>

#include "core/error.h"

namespace kvdice::bench {

BudgetConvention map_budget(const std::string& convention, int budget, int window, bool policy_evicts) {
  BudgetConvention out;
  out.name = convention;
  out.engine.budget = policy_evicts ? budget : 0;
  out.engine.window = window;
  if (convention == "reference") {
    out.description = fmt::format(
        "reference: T={} counts the protected prompt and the window r={}; rounds every r decode tokens once "
        "len > T, back to exactly T; peak T + r",
        budget, window);
  } else if (convention == "vllm") {
    out.description = fmt::format(
        "vllm: KV_BUDGET={} counts the prompt and the recency window; compaction every DIVIDE_LENGTH={} "
        "tokens past the budget, back to exactly the budget (engine T={}, r={}; the port's 128-token kept "
        "window narrows to r in selection: same lengths, rounds and bytes)",
        budget, window, budget, window);
  } else {
    fail("--budget-convention: unknown convention '{}' (expected reference or vllm)", convention);
  }
  if (!policy_evicts) out.description = "unbounded (full attention: the budget does not apply)";
  return out;
}

SequencePlan plan_sequence(int prompt, int output, int budget, int window) {
  SequencePlan plan;
  int len = prompt;
  plan.peak_resident = len;
  for (int step = 1; step < output; ++step) {
    len += 1;  // the previous token's K/V is appended, then the step attends over len slots
    plan.attended_slots += len;
    plan.peak_resident = std::max(plan.peak_resident, len);
    if (budget > 0 && len > budget && len % window == 0) {
      len = budget;
      ++plan.rounds;
    }
  }
  plan.final_resident = len;
  return plan;
}

int predicted_rounds_closed_form(int prompt, int output, int budget, int window) {
  if (budget <= 0 || output < 2) return 0;
  const int64_t last = int64_t{prompt} + output - 1;  // the longest length a decode step would reach
  // The first trigger: the smallest multiple of r above both T and the prompt.
  const int64_t first = (std::max<int64_t>(budget, prompt) / window + 1) * window;
  if (first > last) return 0;
  // After it, T % r == 0 puts every later trigger r steps apart.
  return static_cast<int>(1 + (last - first) / window);
}

}  // namespace kvdice::bench
