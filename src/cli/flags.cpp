#include "cli/flags.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>

#include "engine/sampler.h"

namespace kvdice::cli {
namespace {

// The value of a plain decimal integer, as (negative, magnitude); nullopt for anything else.
std::optional<std::pair<bool, uint64_t>> parse_decimal(const std::string& text) {
  const bool negative = !text.empty() && text[0] == '-';
  const char* begin = text.data() + (negative ? 1 : 0);
  const char* end = text.data() + text.size();
  if (begin == end || *begin < '0' || *begin > '9') return std::nullopt;
  uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(begin, end, magnitude, 10);
  if (ec == std::errc::result_out_of_range) return std::pair{negative, UINT64_MAX};  // beyond any bound
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return std::pair{negative, magnitude};
}

}  // namespace

CLI::Validator integer_in(int64_t min, uint64_t max) {
  const std::string range = fmt::format("[{}, {}]", min, max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        const auto value = parse_decimal(text);
        if (!value) return fmt::format("'{}' is not a decimal integer (expected one in {})", text, range);
        const auto [negative, magnitude] = *value;
        // -magnitude < min, computed without negating INT64_MIN.
        const bool below =
            negative ? (magnitude > 0 && (min >= 0 || magnitude > static_cast<uint64_t>(-(min + 1)) + 1))
                     : (min > 0 && magnitude < static_cast<uint64_t>(min));
        if (below || (!negative && magnitude > max)) return fmt::format("{} is outside {}", text, range);
        // Rewritten in canonical form: CLI11 converts with base 0, reading "010" as octal 8.
        text = negative && magnitude != 0 ? fmt::format("-{}", magnitude) : fmt::format("{}", magnitude);
        return {};
      },
      "INT in " + range);
}

CLI::Validator number_in(double min, double max) {
  const std::string range = fmt::format("[{}, {}]", min, max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        double value = 0.0;
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::general);
        // from_chars also reads "nan" and "inf"; neither is a sampling parameter.
        if (ec != std::errc() || ptr != end || !std::isfinite(value)) {
          return fmt::format("'{}' is not a finite decimal number (expected one in {})", text, range);
        }
        if (value < min || value > max) return fmt::format("{} is outside {}", text, range);
        return {};
      },
      "NUMBER in " + range);
}

CLI::Option* add_int_option(CLI::App* cmd, const std::string& name, int& value, int min, int max,
                            const std::string& help) {
  // transform(), not check(): check() validates a copy, and the canonical rewrite must reach CLI11.
  return cmd->add_option(name, value, help)->transform(integer_in(min, static_cast<uint64_t>(max)));
}

CLI::Option* add_int_option(CLI::App* cmd, const std::string& name, int64_t& value, int64_t min, int64_t max,
                            const std::string& help) {
  return cmd->add_option(name, value, help)->transform(integer_in(min, static_cast<uint64_t>(max)));
}

CLI::Option* add_seed_option(CLI::App* cmd, const std::string& name, uint64_t& value,
                             const std::string& help) {
  return cmd->add_option(name, value, help)->transform(integer_in(0, UINT64_MAX));
}

CLI::Option* add_number_option(CLI::App* cmd, const std::string& name, float& value, double min, double max,
                               const std::string& help) {
  return cmd->add_option(name, value, help)->check(number_in(min, max));
}

CLI::Option* add_number_option(CLI::App* cmd, const std::string& name, double& value, double min, double max,
                               const std::string& help) {
  return cmd->add_option(name, value, help)->check(number_in(min, max));
}

namespace {
// A finite number that `problem` (returning an empty text when fine) accepts.
CLI::Validator sampling_value(std::string (*problem)(double), const std::string& description) {
  return CLI::Validator(
      [problem](std::string& text) -> std::string {
        double value = 0.0;
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::general);
        if (ec != std::errc() || ptr != end || !std::isfinite(value))
          return fmt::format("'{}' is not a finite decimal number", text);
        // The value is stored as a float: check the text's value, then what the engine will see.
        const std::string as_typed = problem(value);
        return as_typed.empty() ? problem(static_cast<float>(value)) : as_typed;
      },
      description);
}
}  // namespace

CLI::Option* add_temperature_option(CLI::App* cmd, const std::string& name, float& value,
                                    const std::string& help) {
  return cmd->add_option(name, value, help)
      ->check(sampling_value(engine::temperature_problem,
                             fmt::format("0 or a NUMBER in [{}, {}]", engine::kMinTemperature,
                                         engine::kMaxTemperature)));
}

CLI::Option* add_top_p_option(CLI::App* cmd, const std::string& name, float& value, const std::string& help) {
  return cmd->add_option(name, value, help)->check(sampling_value(engine::top_p_problem, "NUMBER in (0, 1]"));
}

}  // namespace kvdice::cli
