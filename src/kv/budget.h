// BudgetSpec: the per-sequence KV budget of docs/reference.md §1 (T, r, prompt protection) and the
// trigger, protection and reservation rules derived from it.
#pragma once

#include <cstdint>
#include <string>

namespace kvdice::kv {

// What to do when the prompt does not fit the selection budget (prompt_len >= T - r).
enum class LongPromptRule {
  Warn,   // the reference: protect the first T - r - 1 prompt slots, warn loudly
  Error,  // refuse the request with a clear error
};

struct BudgetSpec {
  int budget = 0;   // T: resident slots right after a round; 0 = unbounded (full attention)
  int window = 64;  // r: newest slots never candidates; rounds fire every r decode tokens
  LongPromptRule long_prompt = LongPromptRule::Warn;

  auto operator<=>(const BudgetSpec&) const = default;
  bool bounded() const { return budget > 0; }
  int selection() const { return budget - window; }  // K_sel
  // Throws Error if bounded and not (T > r, T % r == 0, r > 0).
  void validate() const;
  // Only on decode steps, after the token attended: len > T and len % r == 0.
  bool should_evict(int resident_len) const {
    return bounded() && resident_len > budget && resident_len % window == 0;
  }
  // pl = min(prompt_len, K_sel - 1) for protecting policies.
  int protected_slots(int prompt_len) const;
  bool prompt_too_long(int prompt_len) const { return bounded() && prompt_len >= selection(); }
  // Whether such a prompt decodes under LongPromptRule::Warn, so its caller owes the user the warning.
  bool long_prompt_warned(int prompt_len) const {
    return long_prompt == LongPromptRule::Warn && prompt_too_long(prompt_len);
  }
  // Throws Error under LongPromptRule::Error when the prompt is too long; under Warn the caller
  // warns (the library does not log) and protected_slots() leaves one free selection slot.
  void check_prompt(int prompt_len) const;
  // The warning for a prompt of prompt_len >= T - r tokens under LongPromptRule::Warn (what happens to
  // it, how to avoid it), for the caller to print; long_prompt_effect() is its second half, for a
  // caller that reports many such prompts at once.
  std::string long_prompt_warning(int prompt_len) const;
  std::string long_prompt_effect() const;
  // Slots to reserve at admission: max(prompt, T) + r bounded, prompt + max_new otherwise.
  int reservation(int prompt_len, int max_new_tokens) const;
  std::string describe() const;
};

}  // namespace kvdice::kv
