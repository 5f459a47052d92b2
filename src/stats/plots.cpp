#include "stats/plots.h"

#include <plplot/plplot.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/file_io.h"

namespace kvdice::stats {
namespace {

struct Series {
  std::vector<double> x, y;
};

void plot_one(const std::filesystem::path& file, const std::string& title, const std::string& y_label,
              const std::map<std::string, Series>& by_policy,
              const std::map<std::string, double>& reference) {
  double x_min = 1e300, x_max = -1e300, y_max = 0.0;
  for (const auto& [policy, s] : by_policy) {
    for (double x : s.x) x_min = std::min(x_min, x), x_max = std::max(x_max, x);
    for (double y : s.y) y_max = std::max(y_max, y);
  }
  for (const auto& [policy, y] : reference) y_max = std::max(y_max, y);
  if (x_min > x_max) x_min = 0, x_max = 1;
  if (x_min == x_max) x_min *= 0.5, x_max *= 1.5;  // one budget: centre it
  const double pad = (x_max - x_min) * 0.08;
  // Headroom above the data for the legend in the top right corner.
  y_max = y_max > 0 ? y_max * (1.2 + 0.06 * static_cast<double>(by_policy.size() + reference.size())) : 1.0;

  // Drawn under a temporary name, checked whole (PLplot reports no write error), then renamed: a full
  // disk leaves neither a half PNG nor a success.
  const std::filesystem::path temp = file.string() + ".partial";
  plsdev("pngcairo");
  plsfnam(temp.c_str());
  plspage(0, 0, 800, 560, 0, 0);
  plscolbg(255, 255, 255);
  plscol0(1, 0, 0, 0);
  plinit();
  plcol0(1);
  plenv(x_min - pad, x_max + pad, 0.0, y_max, 0, 0);
  pllab("KV budget T (tokens)", y_label.c_str(), title.c_str());
  // Color-map-0 entries that read well on white.
  const int colors[] = {9, 3, 13, 8, 10, 4, 12};
  int k = 0;
  double legend_y = 0.96;
  auto legend = [&](const std::string& name, int color) {
    plcol0(color);
    plmtex("rv", -1.0, legend_y, 1.0, name.c_str());
    legend_y -= 0.05;
  };
  for (const auto& [policy, y] : reference) {
    const int color = colors[k++ % 7];
    plcol0(color);
    pllsty(2);
    const PLFLT xs[2] = {x_min - pad, x_max + pad}, ys[2] = {y, y};
    plline(2, xs, ys);
    pllsty(1);
    legend(policy + " (no budget)", color);
  }
  for (const auto& [policy, s] : by_policy) {
    const int color = colors[k++ % 7];
    std::vector<size_t> order(s.x.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.x[a] < s.x[b]; });
    std::vector<PLFLT> xs, ys;
    for (size_t i : order) xs.push_back(s.x[i]), ys.push_back(s.y[i]);
    plcol0(color);
    plwidth(2.0);
    plline(static_cast<PLINT>(xs.size()), xs.data(), ys.data());
    plssym(0.0, 2.0);
    plpoin(static_cast<PLINT>(xs.size()), xs.data(), ys.data(), 17);
    plwidth(1.0);
    legend(policy, color);
  }
  plend1();
  std::error_code ec;
  if (!std::filesystem::exists(temp, ec) || std::filesystem::file_size(temp, ec) == 0) {
    std::filesystem::remove(temp, ec);
    fail("PLplot wrote no {} (is the pngcairo driver, Debian's plplot-driver-cairo, installed?)",
         file.string());
  }
  // A whole PNG ends with its IEND chunk; a write cut short by a full disk does not.
  static constexpr std::string_view kPngEnd("IEND\xae\x42\x60\x82", 8);
  const std::string bytes = read_regular_file(temp, uint64_t{1} << 30);
  if (bytes.size() < kPngEnd.size() || bytes.compare(bytes.size() - kPngEnd.size(), kPngEnd.size(), kPngEnd) != 0) {
    std::filesystem::remove(temp, ec);
    fail("cannot write plot {}: the PNG was cut short (disk full?)", file.string());
  }
  std::filesystem::rename(temp, file, ec);
  if (ec) fail("cannot write plot {}: {}", file.string(), ec.message());
}

std::string slug(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  return s;
}

}  // namespace

std::vector<std::filesystem::path> write_plots(const std::vector<StatsRow>& rows,
                                               const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create --plots {}: {}", dir.string(), ec.message());
  std::map<std::pair<std::string, std::string>, std::vector<const CellSummary*>> groups;
  for (const auto& row : rows) groups[{row.cell.task, row.cell.model}].push_back(&row.cell);
  std::vector<std::filesystem::path> written;
  for (const auto& [key, cells] : groups) {
    std::map<std::string, Series> accuracy, length;
    std::map<std::string, double> accuracy_ref, length_ref;
    for (const CellSummary* c : cells) {
      if (c->budget == 0) {
        accuracy_ref[c->policy] = c->accuracy;
        length_ref[c->policy] = c->mean_generated;
        continue;
      }
      accuracy[c->policy].x.push_back(c->budget);
      accuracy[c->policy].y.push_back(c->accuracy);
      length[c->policy].x.push_back(c->budget);
      length[c->policy].y.push_back(c->mean_generated);
    }
    const std::string base = slug(key.first) + "." + slug(key.second);
    const auto acc_file = dir / (base + ".accuracy.png");
    const auto len_file = dir / (base + ".length.png");
    plot_one(acc_file, fmt::format("{} ({}): accuracy", key.first, key.second), "accuracy (mean over runs)",
             accuracy, accuracy_ref);
    plot_one(len_file, fmt::format("{} ({}): generated length", key.first, key.second),
             "mean generated tokens", length, length_ref);
    written.push_back(acc_file);
    written.push_back(len_file);
  }
  return written;
}

}  // namespace kvdice::stats
