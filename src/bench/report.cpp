#include "bench/report.h"

#include <chrono>
#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"

#include "kvdice_git_commit.h"  // KVDICE_GIT_COMMIT, written at build time (cmake/git_commit.cmake)

namespace kvdice::bench {
namespace fs = std::filesystem;

Json run_header() {
  std::string cmdline;
  try {
    const std::string raw = read_regular_file("/proc/self/cmdline", 1 << 20);
    for (char c : raw) cmdline += c == '\0' ? ' ' : c;
    while (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
  } catch (const Error&) {
    cmdline = "unknown";
  }
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return Json{{"command", cmdline}, {"date", date}, {"git_commit", KVDICE_GIT_COMMIT}};
}

void append_json_run(const std::string& path, const Json& run) {
  Json doc = Json{{"runs", Json::array()}};
  if (fs::exists(path) && fs::is_regular_file(path) && fs::file_size(path) > 0) {
    doc = read_json_file(path);  // a syntax error is an Error naming the file: nothing is overwritten
    if (!doc.is_object() || !doc.contains("runs") || !doc["runs"].is_array())
      fail(
          "--json-out {}: exists and is not a kvdice bench file (an object with a \"runs\" list); not "
          "overwriting it",
          path);
  }
  doc["runs"].push_back(run);
  write_file_atomically(path, doc.dump(2) + "\n");
}

namespace {

std::string fmt_number(const Json& v, int digits = 1) {
  if (v.is_null()) return "-";
  if (v.is_number_float()) return fmt::format("{:.{}f}", v.get<double>(), digits);
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// The protocol's headline cells: (label, value).
std::vector<std::pair<std::string, std::string>> headline(const Json& run) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string protocol = run.value("protocol", "");
  const Json& results = run["results"];
  for (const Json& r : results) {
    const std::string label = r.value("label", protocol);
    const Json& m = r["metrics"];
    if (m.contains("output_tok_s_decode")) {
      out.emplace_back(
          label, fmt::format(
                     "{} tok/s decode ({} e2e), {} ms/step, {} GB/s = {}% of {} GB/s, peak {} GiB, rounds {}",
                     fmt_number(m["output_tok_s_decode"]), fmt_number(m["output_tok_s_end_to_end"]),
                     fmt_number(m["mean_step_ms"], 3), fmt_number(m["achieved_gb_s"]),
                     fmt_number(Json(100.0 * m.value("roofline_fraction", 0.0))),
                     fmt_number(Json(run.value("bandwidth_gb_s", 0.0))),
                     fmt_number(Json(run.value("peak_memory_bytes", int64_t{0}) / 1073741824.0), 2),
                     fmt_number(m["eviction_rounds_total"])));
    } else if (m.contains("ttft") && m.contains("request_throughput")) {
      int64_t errors = 0;
      for (const auto& [kind, count] : m["errors"].items()) errors += count.get<int64_t>();
      out.emplace_back(
          label, fmt::format("{} req/s, {} output tok/s ({} total), TTFT p50 {} ms p99 {} ms, TPOT p50 {} ms, "
                             "ITL p50 {} ms p99 {} ms, E2E p50 {} ms; {} of {} done, {} errors",
                             fmt_number(m["request_throughput"], 2), fmt_number(m["output_tok_s"]),
                             fmt_number(m["total_tok_s"]), fmt_number(m["ttft"]["p50_ms"]),
                             fmt_number(m["ttft"]["p99_ms"]), fmt_number(m["tpot"]["p50_ms"], 2),
                             fmt_number(m["itl"]["p50_ms"], 2), fmt_number(m["itl"]["p99_ms"], 2),
                             fmt_number(m["e2el"]["p50_ms"]), fmt_number(m["completed"]),
                             fmt_number(Json(m["completed"].get<int64_t>() + m["failed"].get<int64_t>())),
                             errors));
    } else if (m.contains("round_ms_model")) {
      const bool per_call = m.value("round_ms_layer_from", std::string("one-layer evict call")) ==
                            "one-layer evict call";
      std::string text =
          fmt::format("round {} ms/model, {} ms/{}, {}% of decode", fmt_number(m["round_ms_model"], 4),
                      fmt_number(m["round_ms_layer"], 4), per_call ? "layer call" : "layer (model / layers)",
                      fmt_number(Json(100.0 * m.value("decode_share", 0.0)), 3));
      if (m.value("signals", std::string("none")) != "none")
        text += fmt::format("; step {} ms with its signals ({}), {} ms without: {}% of decode with them",
                            fmt_number(m["decode_step_ms"], 3), m["signals"].get<std::string>(),
                            fmt_number(m["decode_step_ms_without_signals"], 3),
                            fmt_number(Json(100.0 * m.value("decode_share_with_signals", 0.0)), 3));
      if (m.contains("prefill_ms")) {
        text += fmt::format("; prefill of {} tokens {} ms", fmt_number(m["prefill_tokens"]),
                            fmt_number(m["prefill_ms"], 3));
        if (m.value("signals", std::string("none")) != "none")
          text +=
              fmt::format(" with its signals, {} ms without", fmt_number(m["prefill_ms_without_signals"], 3));
      }
      out.emplace_back(label, text);
    }
  }
  return out;
}

}  // namespace

std::string summary_text(const Json& run) {
  std::string out;
  for (const auto& [label, text] : headline(run)) out += fmt::format("  {}: {}\n", label, text);
  out += fmt::format("  validation: {}\n", run["validation"]["ok"].get<bool>() ? "ok" : "FAILED");
  return out;
}

void append_markdown_row(const std::string& path, const Json& run) {
  std::string text;
  if (fs::exists(path) && fs::file_size(path) > 0) {
    text = read_regular_file(path, uint64_t{64} << 20);
    if (text.back() != '\n') text += '\n';
  } else {
    text =
        "| date | protocol | model | backend | parameters | results | valid "
        "|\n|---|---|---|---|---|---|---|\n";
  }
  std::string results;
  for (const auto& [label, cell] : headline(run))
    results += (results.empty() ? "" : "<br>") + label + ": " + cell;
  const Json& p = run["parameters"];
  std::string params;
  for (const auto& [key, value] : p.items()) {
    if ((value.is_structured() && !value.is_array()) || key == "budget_rule") continue;  // the JSON has it
    params += fmt::format("{}{}={}", params.empty() ? "" : " ", key, fmt_number(value, 2));
  }
  auto escape = [](std::string s) {
    std::string o;
    for (char c : s) o += c == '|' ? std::string("\\|") : std::string(1, c);
    return o;
  };
  text +=
      fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", run.value("date", ""), run.value("protocol", ""),
                  escape(run.value("model", "")), escape(run.value("device", "")), escape(params),
                  escape(results), run["validation"]["ok"].get<bool>() ? "yes" : "**NO**");
  write_file_atomically(path, text);
}

}  // namespace kvdice::bench
