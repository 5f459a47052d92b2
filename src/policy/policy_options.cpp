#include "policy/policy_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace kvdice::policy {

PolicyOptions::PolicyOptions(std::string_view spec) {
  const size_t colon = spec.find(':');
  name_ = std::string(spec.substr(0, colon));
  if (colon == std::string_view::npos) return;
  std::string_view rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      fail("policy spec '{}': option '{}' is not key=value", spec, item);
    const std::string key(item.substr(0, eq));
    if (given_.count(key)) fail("policy spec '{}': option '{}' given twice", spec, key);
    given_[key] = std::string(item.substr(eq + 1));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
}

int PolicyOptions::get_int(std::string_view key, int fallback, int lo, int hi) {
  int value = fallback;
  read_keys_.emplace_back(key);
  if (auto it = given_.find(key); it != given_.end()) {
    const std::string& text = it->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
      fail("policy '{}': option {}='{}' is not an integer", name_, key, text);
  }
  if (value < lo || value > hi) fail("policy '{}': option {}={} outside [{}, {}]", name_, key, value, lo, hi);
  used_.emplace_back(std::string(key), std::to_string(value));
  return value;
}

double PolicyOptions::get_double(std::string_view key, double fallback, double lo, double hi) {
  double value = fallback;
  read_keys_.emplace_back(key);
  if (auto it = given_.find(key); it != given_.end()) {
    const std::string& text = it->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
      fail("policy '{}': option {}='{}' is not a number", name_, key, text);
  }
  if (value < lo || value > hi) fail("policy '{}': option {}={} outside [{}, {}]", name_, key, value, lo, hi);
  used_.emplace_back(std::string(key), fmt::format("{}", value));
  return value;
}

std::string PolicyOptions::get_string(std::string_view key, std::string fallback) {
  read_keys_.emplace_back(key);
  std::string value = std::move(fallback);
  if (auto it = given_.find(key); it != given_.end()) value = it->second;
  used_.emplace_back(std::string(key), value);
  return value;
}

int PolicyOptions::require_int(std::string_view key) {
  if (!given_.count(key)) fail("policy '{}': option {} is not stated", name_, key);
  return get_int(key, 0, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
}

double PolicyOptions::require_double(std::string_view key) {
  if (!given_.count(key)) fail("policy '{}': option {} is not stated", name_, key);
  return get_double(key, 0.0, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
}

std::string PolicyOptions::require_string(std::string_view key) {
  if (!given_.count(key)) fail("policy '{}': option {} is not stated", name_, key);
  return get_string(key, {});
}

void PolicyOptions::finish() const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : given_)
    if (std::find(read_keys_.begin(), read_keys_.end(), key) == read_keys_.end()) unknown.push_back(key);
  if (unknown.empty()) return;
  if (read_keys_.empty()) fail("policy '{}' takes no options, got {}", name_, fmt::join(unknown, ", "));
  fail("policy '{}': unknown option(s) {}; it takes {}", name_, fmt::join(unknown, ", "),
       fmt::join(read_keys_, ", "));
}

std::string PolicyOptions::canonical() const {
  std::vector<std::string> parts;
  for (const auto& [key, value] : used_) parts.push_back(key + "=" + value);
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace kvdice::policy
