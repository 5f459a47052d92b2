#include "kv/budget.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kvdice::kv {

void BudgetSpec::validate() const {
  if (budget < 0) fail("--budget (T) must be >= 0 (0 = unbounded), got {}", budget);
  if (window <= 0) fail("--window (r) must be > 0, got {}", window);
  if (!bounded()) return;
  if (budget <= window) fail("--budget (T) must be greater than --window (r), got T={} r={}", budget, window);
  if (budget % window != 0) {
    fail("--budget (T) must be a multiple of --window (r), got T={} r={} (T % r = {})", budget, window,
         budget % window);
  }
}

int BudgetSpec::protected_slots(int prompt_len) const {
  int pl = std::max(prompt_len, 0);
  // Unbounded runs never evict, so the whole prompt is trivially protected.
  if (!bounded()) return pl;
  return std::min(pl, selection() - 1);
}

void BudgetSpec::check_prompt(int prompt_len) const {
  if (long_prompt == LongPromptRule::Error && prompt_too_long(prompt_len)) {
    fail(
        "prompt of {} tokens does not fit the budget (--budget T={}, --window r={}): it needs prompt < T - r "
        "= {}; "
        "raise --budget or use --long-prompt warn",
        prompt_len, budget, window, selection());
  }
}

std::string BudgetSpec::long_prompt_warning(int prompt_len) const {
  return fmt::format("PROMPT LONGER THAN THE BUDGET: prompt {} tokens >= T - r = {}; {}", prompt_len, selection(),
                     long_prompt_effect());
}

std::string BudgetSpec::long_prompt_effect() const {
  return fmt::format(
      "only the first {} prompt slots are protected and one slot is left for everything else (the "
      "reference's behaviour; accuracy collapses). Raise --budget or pass --long-prompt error.",
      selection() - 1);
}

int BudgetSpec::reservation(int prompt_len, int max_new_tokens) const {
  if (bounded()) return std::max(prompt_len, budget) + window;
  return prompt_len + max_new_tokens;
}

std::string BudgetSpec::describe() const {
  if (!bounded()) return "unbounded (full attention)";
  return fmt::format("T={} r={} K_sel={} long_prompt={}", budget, window, selection(),
                     long_prompt == LongPromptRule::Warn ? "warn" : "error");
}

}  // namespace kvdice::kv
