#include "stats/table.h"

#include <cmath>

#include "core/error.h"
#include "eval/export.h"

namespace kvdice::stats {
namespace {

std::string mark(const StatsRow& row) {
  if (!row.comparison) return "";
  if (!row.comparison->bootstrap.significant) return "tie";
  return row.comparison->bootstrap.mean > 0 ? "win" : "loss";
}

std::string latex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '%' || c == '&' || c == '#' || c == '$') out += '\\';
    out += c;
  }
  return out;
}

std::string per_hour_unit(const CellCost& cost) {
  if (cost.device_kind == "GPU") return "GPU-h";
  if (cost.device_kind == "CPU") return "CPU device-h";
  return "device-h (GPU and CPU runs)";
}

// Markdown cells: "n/a" where the store cannot say (records from before the runs table, grades from
// before exact_match), "-" where the figure does not apply.
std::string wall_text(const CellSummary& c) {
  return c.cost.known ? fmt::format("{:.1f}", c.cost.wall_seconds) : "n/a";
}
std::string per_hour_text(const CellSummary& c) {
  return c.correct_per_device_hour
             ? fmt::format("{:.2f} per {}", *c.correct_per_device_hour, per_hour_unit(c.cost))
             : "n/a";
}
std::string exact_match_text(const CellSummary& c, int digits) {
  if (!c.exact_match_applies) return "-";
  return c.exact_match ? fmt::format("{:.{}f}", *c.exact_match, digits) : "n/a";
}

}  // namespace

TableFormat table_format_from_name(const std::string& name) {
  if (name == "markdown" || name == "md") return TableFormat::Markdown;
  if (name == "csv") return TableFormat::Csv;
  if (name == "latex" || name == "tex") return TableFormat::Latex;
  fail("--format must be markdown, csv or latex (got '{}')", name);
}

std::string render_table(const std::vector<StatsRow>& rows, TableFormat format) {
  std::string out;
  switch (format) {
    case TableFormat::Markdown:
      out +=
          "| cell | task | policy | T | problems x runs | accuracy | acc. strict | terminated | run sd | "
          "mean gen. tokens | rounds | baseline | diff | 95% CI | boot p | sign p | result | correct | wall "
          "s | "
          "correct per device-hour | lm-eval EM |\n";
      out +=
          "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---|---:|---:|---:|---"
          ":|\n";
      break;
    case TableFormat::Csv:
      out +=
          "cell,task,policy,budget,problems,runs,accuracy,mean_generated_tokens,mean_rounds,baseline,diff,"
          "ci_low,ci_high,sign_positive,sign_negative,sign_p,result,acc_strict,termination_rate,run_std,"
          "boot_p,correct,wall_seconds,correct_per_device_hour,device_hour_kind,lm_eval_exact_match\n";  // columns
                                                                                                         // added
                                                                                                         // later
                                                                                                         // go
                                                                                                         // last,
                                                                                                         // so
                                                                                                         // readers
                                                                                                         // by
                                                                                                         // position
                                                                                                         // keep
                                                                                                         // working
      break;
    case TableFormat::Latex:
      out +=
          "\\begin{tabular}{llrrrrrlrlrr}\n\\toprule\ncell & policy & $T$ & acc. & strict & gen. & rounds & "
          "baseline & $\\Delta$ & 95\\% CI & boot $p$ & sign $p$ \\\\\n\\midrule\n";
      break;
  }
  for (const auto& row : rows) {
    const auto& c = row.cell;
    const std::string budget = c.budget > 0 ? std::to_string(c.budget) : "full";
    const auto* cmp = row.comparison ? &*row.comparison : nullptr;
    const std::string m = mark(row);
    switch (format) {
      case TableFormat::Markdown: {
        const std::string bold = m == "win" || m == "loss" ? "**" : "";
        out += fmt::format(
            "| {} | {} | {} | {} | {}x{} | {:.4f} | {:.4f} | {:.4f} | {} | {:.1f} | {:.1f} | {} | {} | {} | "
            "{} | "
            "{} | {} | {:.0f} | {} | {} | {} |\n",
            c.info.name, c.task, c.policy, budget, c.info.problems, c.info.runs, c.accuracy,
            c.accuracy_strict, c.termination_rate,
            std::isnan(c.run_std) ? "-" : fmt::format("{:.4f}", c.run_std), c.mean_generated, c.mean_rounds,
            cmp ? cmp->baseline : "-",
            cmp ? fmt::format("{}{:+.4f}{}", bold, cmp->bootstrap.mean, bold) : "-",
            cmp ? fmt::format("[{:+.4f}, {:+.4f}]", cmp->bootstrap.low, cmp->bootstrap.high) : "-",
            cmp ? fmt::format("{:.4g}", cmp->bootstrap.p_value) : "-",
            cmp ? fmt::format("{:.4g}", cmp->sign.p_value) : "-", m.empty() ? "-" : m, c.correct,
            wall_text(c), per_hour_text(c), exact_match_text(c, 4));
        break;
      }
      case TableFormat::Csv:
        out += fmt::format(
            "{},{},{},{},{},{},{:.6f},{:.3f},{:.3f},{},{},{},{},{},{},{},{},{:.6f},{:.6f},{},{},{:.0f},{},{},"
            "{},{}\n",
            eval::csv_field(c.info.name), c.task, c.policy, c.budget, c.info.problems, c.info.runs,
            c.accuracy, c.mean_generated, c.mean_rounds, cmp ? eval::csv_field(cmp->baseline) : "",
            cmp ? fmt::format("{:.6f}", cmp->bootstrap.mean) : "",
            cmp ? fmt::format("{:.6f}", cmp->bootstrap.low) : "",
            cmp ? fmt::format("{:.6f}", cmp->bootstrap.high) : "",
            cmp ? std::to_string(cmp->sign.positive) : "", cmp ? std::to_string(cmp->sign.negative) : "",
            cmp ? fmt::format("{:.6g}", cmp->sign.p_value) : "", m, c.accuracy_strict, c.termination_rate,
            std::isnan(c.run_std) ? "" : fmt::format("{:.6f}", c.run_std),
            cmp ? fmt::format("{:.6g}", cmp->bootstrap.p_value) : "", c.correct,
            c.cost.known ? fmt::format("{:.3f}", c.cost.wall_seconds) : "n/a",
            c.correct_per_device_hour ? fmt::format("{:.6g}", *c.correct_per_device_hour) : "n/a",
            c.cost.known ? c.cost.device_kind : "", exact_match_text(c, 6));
        break;
      case TableFormat::Latex: {
        std::string diff = "--";
        if (cmp) {
          diff = fmt::format("${:+.3f}$", cmp->bootstrap.mean);
          if (m == "win") diff = "\\textbf{" + diff + "}$^\\uparrow$";
          if (m == "loss") diff = "\\textbf{" + diff + "}$^\\downarrow$";
        }
        out += fmt::format(
            "{} & {} & {} & {:.3f} & {:.3f} & {:.0f} & {:.1f} & {} & {} & {} & {} & {} \\\\\n",
            latex_escape(c.info.name), latex_escape(c.policy), budget, c.accuracy, c.accuracy_strict,
            c.mean_generated, c.mean_rounds, cmp ? latex_escape(cmp->baseline) : "--", diff,
            cmp ? fmt::format("$[{:+.3f}, {:+.3f}]$", cmp->bootstrap.low, cmp->bootstrap.high) : "--",
            cmp ? fmt::format("{:.3g}", cmp->bootstrap.p_value) : "--",
            cmp ? fmt::format("{:.3g}", cmp->sign.p_value) : "--");
        break;
      }
    }
  }
  if (format == TableFormat::Latex) out += "\\bottomrule\n\\end{tabular}\n";
  // The count across cells goes below the table; CSV stays one row per cell.
  const Outcomes o = count_outcomes(rows);
  if (o.compared > 0 && format == TableFormat::Markdown)
    out += fmt::format("\nSignificant: {} wins and {} losses of {} compared cells.\n", o.wins, o.losses,
                       o.compared);
  if (o.compared > 0 && format == TableFormat::Latex)
    out += fmt::format("% significant: {} wins and {} losses of {} compared cells\n", o.wins, o.losses,
                       o.compared);
  return out;
}

std::string render_by_level(const std::vector<StatsRow>& rows, TableFormat format) {
  std::string out;
  const bool csv = format == TableFormat::Csv;
  out += csv ? "cell,level,problems,accuracy\n" : "| cell | level | problems | accuracy |\n|---|---|---:|---:|\n";
  bool any = false;
  for (const auto& row : rows)
    for (const auto& l : row.cell.by_level) {
      any = true;
      out += csv ? fmt::format("{},{},{},{:.6f}\n", eval::csv_field(row.cell.info.name), eval::csv_field(l.level),
                               l.problems, l.accuracy)
                 : fmt::format("| {} | {} | {} | {:.4f} |\n", row.cell.info.name, l.level, l.problems, l.accuracy);
    }
  if (!any) fail("--by-level: no cell's dataset has a \"level\" field");
  return out;
}

std::string render_per_problem_csv(const std::vector<StatsRow>& rows) {
  std::string out = "problem";
  size_t problems = 0;
  for (const auto& row : rows) {
    out += "," + eval::csv_field(row.cell.info.name);
    problems = std::max(problems, row.cell.per_problem.size());
  }
  out += "\n";
  for (size_t p = 0; p < problems; ++p) {
    out += std::to_string(p);
    for (const auto& row : rows)
      out += p < row.cell.per_problem.size() ? fmt::format(",{}", row.cell.per_problem[p]) : ",";
    out += "\n";
  }
  return out;
}

}  // namespace kvdice::stats
