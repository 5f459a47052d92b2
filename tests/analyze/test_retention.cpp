// Retention logs and their statistics: exact values on hand-built logs against an independent count,
// real logs from generate, eval run and probe passcode on the tiny Qwen3 fixture, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "analyze/retention_log.h"
#include "analyze/retention_stats.h"
#include "cli/run_command.h"
#include "core/json.h"

namespace kvdice::analyze {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_kvdice;
using Kept = std::vector<std::vector<std::vector<int32_t>>>;

const std::string kModel = std::string(KVDICE_FIXTURES_DIR) + "/qwen3";

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvdice_analyze_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

RetentionLogHeader header(int layers, int heads) {
  return {"generate", "hand-built", "random_pp", "", 8, 2, layers, heads};
}

struct Rec {
  uint64_t sequence;
  int prompt_len;
  uint32_t round;
  int64_t at_token;
  Kept kept;
};

fs::path write_log(const fs::path& path, const RetentionLogHeader& h, const std::vector<Rec>& recs) {
  std::ofstream out(path);
  out << retention_header_line(h);
  for (const Rec& r : recs) {
    kv::RoundRecord record{r.round, r.at_token, r.kept};
    out << retention_round_line(r.sequence, r.prompt_len, record);
  }
  return path;
}

const AgeBinStats& age_row(const RetentionStats& s, int layer, int64_t lo) {
  for (const auto& a : s.per_age)
    if (a.layer == layer && a.lo == lo) return a;
  throw std::runtime_error("no age row");
}

// Two heads, prompt of 2, length 10: every statistic worked out by hand.
TEST(Retention, HandWorkedExample) {
  const fs::path dir = temp_dir("hand");
  const auto path =
      write_log(dir / "log.jsonl", header(1, 2), {{0, 2, 0, 10, {{{0, 1, 3, 5, 8, 9}, {0, 1, 4, 5, 7, 9}}}}});
  const auto sections = read_retention_log(path);
  ASSERT_EQ(sections.size(), 1u);
  RetentionStatsOptions o;
  o.age_edges = {1, 3, 6};
  o.position_bins = 2;
  const RetentionStats s = analyze_retention("log", sections[0], o);
  ASSERT_EQ(s.per_round.size(), 1u);
  const auto& r = s.per_round[0];
  EXPECT_DOUBLE_EQ(r.generated, 8);
  EXPECT_DOUBLE_EQ(r.union_fraction, 6.0 / 8);  // {3,4,5,7,8,9}
  EXPECT_DOUBLE_EQ(r.per_head_fraction, 4.0 / 8);
  EXPECT_DOUBLE_EQ(r.jaccard, 2.0 / 6);  // {5,9} of {3,4,5,7,8,9}; the shared prompt does not count
  EXPECT_DOUBLE_EQ(r.prompt_union, 1.0);
  EXPECT_DOUBLE_EQ(r.prompt_per_head, 1.0);
  // Halves [2,6) and [6,10): head 0 has 2 and 2 (entropy 1), head 1 has 2 and 2.
  EXPECT_DOUBLE_EQ(r.coverage_entropy, 1.0);
  // Ages: p=9 -> 1, 8 -> 2 | 7 -> 3, 6 -> 4, 5 -> 5 | 4 -> 6, 3 -> 7, 2 -> 8.
  const auto& young = age_row(s, 0, 1);
  EXPECT_EQ(young.positions, 2);
  EXPECT_DOUBLE_EQ(young.per_head, (1.0 + 0.5) / 2);
  EXPECT_DOUBLE_EQ(young.union_, 1.0);
  EXPECT_DOUBLE_EQ(young.ceiling, 1.0);
  const auto& mid = age_row(s, 0, 3);
  EXPECT_EQ(mid.positions, 3);
  EXPECT_EQ(mid.hi, 6);
  EXPECT_DOUBLE_EQ(mid.per_head, 0.5);
  EXPECT_DOUBLE_EQ(mid.union_, 2.0 / 3);
  EXPECT_NEAR(mid.ceiling, 1 - (2.0 / 3) * (1.0 / 3), 1e-15);
  EXPECT_NEAR(mid.ceiling_h, 0.75, 1e-15);
  EXPECT_NEAR(mid.deficit, 1.0 / 9, 1e-15);
  const auto& old = age_row(s, 0, 6);
  EXPECT_EQ(old.positions, 3);
  EXPECT_EQ(old.hi, -1);
  EXPECT_NEAR(old.per_head, 1.0 / 3, 1e-15);
  EXPECT_NEAR(old.union_, 2.0 / 3, 1e-15);
  EXPECT_NEAR(old.ceiling, 5.0 / 9, 1e-15);
  EXPECT_NEAR(old.deficit, -1.0 / 9, 1e-15);
  fs::remove_all(dir);
}

// Random logs over several sequences, rounds and layers against a direct count written here.
TEST(Retention, RandomLogsMatchAnIndependentCount) {
  const fs::path dir = temp_dir("random");
  std::mt19937 rng(7);
  const int layers = 3, heads = 4;
  std::vector<Rec> recs;
  for (uint64_t seq = 0; seq < 3; ++seq) {
    const int pl = 3 + static_cast<int>(seq) * 5;
    for (uint32_t round = 0; round < 4; ++round) {
      const int64_t n = pl + 40 + round * 37 + seq;
      Rec r{seq, pl, round, n, Kept(layers, std::vector<std::vector<int32_t>>(heads))};
      for (auto& layer : r.kept)
        for (auto& kept : layer)
          for (int32_t p = 0; p < n; ++p)
            if (std::uniform_real_distribution<double>(0, 1)(rng) < (p < pl ? 0.8 : 0.35)) kept.push_back(p);
      recs.push_back(std::move(r));
    }
  }
  const auto sections = read_retention_log(write_log(dir / "log.jsonl", header(layers, heads), recs));
  RetentionStatsOptions o;
  o.age_edges = {2, 10, 25, 60};
  const RetentionStats s = analyze_retention("log", sections[0], o);

  for (int layer = 0; layer < layers; ++layer) {
    const size_t bins = o.age_edges.size();
    std::vector<double> total(bins), uni(bins);
    std::vector<std::vector<double>> kept(heads, std::vector<double>(bins));
    std::map<uint32_t, std::pair<double, double>> union_and_jaccard;  // summed over sequences
    for (const Rec& r : recs) {
      std::vector<std::set<int32_t>> sets(heads);
      for (int h = 0; h < heads; ++h)
        for (int32_t p : r.kept[layer][h])
          if (p >= r.prompt_len) sets[h].insert(p);
      std::set<int32_t> all;
      for (const auto& set : sets) all.insert(set.begin(), set.end());
      double jac = 0;
      int pairs = 0;
      for (int a = 0; a < heads; ++a)
        for (int b = a + 1; b < heads; ++b) {
          int inter = 0;
          for (int32_t p : sets[a]) inter += sets[b].count(p);
          jac += static_cast<double>(inter) / (sets[a].size() + sets[b].size() - inter);
          ++pairs;
        }
      union_and_jaccard[r.round].first += static_cast<double>(all.size()) / (r.at_token - r.prompt_len);
      union_and_jaccard[r.round].second += jac / pairs;
      for (int32_t p = r.prompt_len; p < r.at_token; ++p) {
        const int64_t age = r.at_token - p;
        int b = -1;
        for (size_t i = 0; i < bins; ++i)
          if (age >= o.age_edges[i]) b = static_cast<int>(i);
        if (b < 0) continue;
        total[b] += 1;
        uni[b] += all.count(p);
        for (int h = 0; h < heads; ++h) kept[h][b] += sets[h].count(p);
      }
    }
    for (const auto& row : s.per_round) {
      if (row.layer != layer) continue;
      EXPECT_NEAR(row.union_fraction, union_and_jaccard[row.round].first / 3, 1e-12);
      EXPECT_NEAR(row.jaccard, union_and_jaccard[row.round].second / 3, 1e-12);
    }
    for (size_t b = 0; b < bins; ++b) {
      double mean = 0, miss = 1;
      for (int h = 0; h < heads; ++h)
        mean += kept[h][b] / total[b] / heads, miss *= 1 - kept[h][b] / total[b];
      const auto& row = age_row(s, layer, o.age_edges[b]);
      EXPECT_EQ(row.positions, static_cast<int64_t>(total[b]));
      EXPECT_NEAR(row.per_head, mean, 1e-12);
      EXPECT_NEAR(row.union_, uni[b] / total[b], 1e-12);
      EXPECT_NEAR(row.ceiling, 1 - miss, 1e-12);
      EXPECT_NEAR(row.ceiling_h, 1 - std::pow(1 - mean, heads), 1e-12);
    }
  }
  // --heads: the union of the chosen sites, across layers.
  o.sites = {{0, 1}, {2, 3}};
  const RetentionStats chosen = analyze_retention("log", sections[0], o);
  for (const auto& row : chosen.per_round) EXPECT_EQ(row.layer, -1);
  double total = 0, uni = 0;
  for (const Rec& r : recs)
    for (int32_t p = r.prompt_len; p < r.at_token; ++p) {
      if (r.at_token - p < 60) continue;
      total += 1;
      const auto& a = r.kept[0][1];
      const auto& b = r.kept[2][3];
      uni += std::binary_search(a.begin(), a.end(), p) || std::binary_search(b.begin(), b.end(), p);
    }
  EXPECT_NEAR(age_row(chosen, -1, 60).union_, uni / total, 1e-12);
  fs::remove_all(dir);
}

// What `full` holds (every position in every head): survival 1 everywhere, nothing to gain from union.
TEST(Retention, EverythingKeptGivesSurvivalOne) {
  const fs::path dir = temp_dir("full");
  std::vector<int32_t> all(276);  // 256 generated: 16 equal position bins
  for (int i = 0; i < 276; ++i) all[i] = i;
  const auto sections = read_retention_log(
      write_log(dir / "log.jsonl", header(2, 3), {{0, 20, 0, 276, Kept(2, {all, all, all})}}));
  RetentionStatsOptions o;
  o.age_edges = {1, 128, 256};
  const RetentionStats s = analyze_retention("log", sections[0], o);
  for (const auto& a : s.per_age) {
    EXPECT_DOUBLE_EQ(a.per_head, 1.0);
    EXPECT_DOUBLE_EQ(a.union_, 1.0);
    EXPECT_DOUBLE_EQ(a.ceiling, 1.0);
    EXPECT_DOUBLE_EQ(a.deficit, 0.0);
  }
  for (const auto& r : s.per_round) {
    EXPECT_DOUBLE_EQ(r.jaccard, 1.0);
    EXPECT_NEAR(r.coverage_entropy, 1.0, 1e-12);
  }
  fs::remove_all(dir);
}

// CSV rows of `analyze retention --format csv`, keyed by column name.
std::vector<std::map<std::string, std::string>> parse_csv(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  std::stringstream head(line);
  for (std::string cell; std::getline(head, cell, ',');) names.push_back(cell);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    std::map<std::string, std::string> row;
    size_t i = 0, start = 0;
    while (i < names.size()) {
      const size_t end = line.find(',', start);
      row[names[i++]] = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (end == std::string::npos) break;
      start = end + 1;
    }
    EXPECT_EQ(i, names.size()) << line;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::map<std::string, std::string>> generate_and_analyze(const fs::path& dir,
                                                                     const std::string& policy) {
  const std::string log = (dir / (policy + ".jsonl")).string();
  const CommandResult g =
      run_kvdice({"generate", "--model",         kModel,      "-p",       "retention", "--policy",
                  policy,     "--budget",        "64",        "--window", "16",        "-n",
                  "1000",     "--ignore-eos",    "--backend", "cpu",      "--threads", "1",
                  "-q",       "--retention-log", log});
  EXPECT_EQ(g.exit_code, 0) << g.err;
  const std::string out = (dir / (policy + ".csv")).string();
  const CommandResult a = run_kvdice(
      {"analyze", "retention", log, "--format", "csv", "--out", out, "--age-bins", "16,32,64,128,256"});
  EXPECT_EQ(a.exit_code, 0) << a.err;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  return parse_csv(text.str());
}

// A real random_pp run: independent heads hold more together than each alone, close to the ceiling;
// random_shared (one draw shared by every head) holds no more together than one head.
TEST(Retention, GeneratedRandomPpUnionBeatsEachHead) {
  const fs::path dir = temp_dir("generate");
  const auto rows = generate_and_analyze(dir, "random_pp");
  int rounds = 0, checked = 0;
  for (const auto& row : rows) {
    if (row.at("table") == "round") {
      ++rounds;
      EXPECT_GE(std::stod(row.at("union")), std::stod(row.at("per_head")));
      EXPECT_DOUBLE_EQ(std::stod(row.at("prompt_union")), 1.0);  // the prompt is protected
      continue;
    }
    if (row.at("layer") != "mean") continue;
    const double s = std::stod(row.at("per_head")), u = std::stod(row.at("union"));
    const double ceiling = std::stod(row.at("ceiling"));
    if (s > 0.05 && s < 0.95) {
      EXPECT_GT(u, s + 0.1) << row.at("age_lo");
      EXPECT_LT(std::abs(ceiling - u), 0.05) << row.at("age_lo");  // independent draws: near the ceiling
      ++checked;
    }
  }
  EXPECT_GT(rounds, 100);  // 2 layers x ~60 rounds
  EXPECT_GE(checked, 2);

  for (const auto& row : generate_and_analyze(dir, "random_shared")) {
    if (row.at("table") != "age" || row.at("layer") != "mean" || row.at("per_head").empty()) continue;
    EXPECT_DOUBLE_EQ(std::stod(row.at("union")), std::stod(row.at("per_head")));
    if (std::stod(row.at("per_head")) > 0.05 && std::stod(row.at("per_head")) < 0.95)
      EXPECT_GT(std::stod(row.at("deficit")), 0.1);
  }
  fs::remove_all(dir);
}

std::string analyze_md(const std::string& log) {
  const CommandResult a = run_kvdice({"analyze", "retention", log, "--age-bins", "4,8"});
  EXPECT_EQ(a.exit_code, 0) << a.err;
  return a.out;
}

// eval run and probe passcode write the same format (one section per evicting probe policy).
TEST(Retention, EvalRunAndProbeWriteLogs) {
  const fs::path dir = temp_dir("eval_probe");
  const std::string eval_log = (dir / "eval.jsonl").string();
  const CommandResult e = run_kvdice({"eval",
                                      "run",
                                      "--model",
                                      kModel,
                                      "--task",
                                      "math500",
                                      "--dataset",
                                      std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl",
                                      "--results",
                                      (dir / "res").string(),
                                      "--policy",
                                      "random_pp",
                                      "--budget",
                                      "80",
                                      "--window",
                                      "16",
                                      "--max-new-tokens",
                                      "120",
                                      "--limit",
                                      "2",
                                      "--runs",
                                      "2",
                                      "--threads",
                                      "1",
                                      "-q",
                                      "--retention-log",
                                      eval_log});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto eval_sections = read_retention_log(eval_log);
  ASSERT_EQ(eval_sections.size(), 1u);
  EXPECT_EQ(eval_sections[0].header.source, "eval run");
  EXPECT_EQ(eval_sections[0].header.budget, 80);
  std::set<uint64_t> sequences;
  for (const auto& r : eval_sections[0].rounds) sequences.insert(r.sequence);
  EXPECT_EQ(sequences.size(), 4u);  // 2 problems x 2 runs
  EXPECT_NE(analyze_md(eval_log).find("eval run policy random_pp"), std::string::npos);

  const std::string probe_log = (dir / "probe.jsonl").string();
  const CommandResult p = run_kvdice(
      {"probe",           "passcode", "--model",   kModel, "--policies", "full,random_pp,recency_pp",
       "--budget",        "64",       "--window",  "8",    "--rounds",   "3",
       "--instances",     "2",        "--backend", "cpu",  "--threads",  "1",
       "--retention-log", probe_log});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto probe_sections = read_retention_log(probe_log);
  ASSERT_EQ(probe_sections.size(), 2u);  // full never evicts
  EXPECT_EQ(probe_sections[0].header.policy, "random_pp");
  EXPECT_EQ(probe_sections[1].header.policy, "recency_pp");
  for (const auto& section : probe_sections) EXPECT_FALSE(section.rounds.empty());
  const std::string md = analyze_md(probe_log);
  EXPECT_NE(md.find("policy random_pp"), std::string::npos);
  EXPECT_NE(md.find("policy recency_pp"), std::string::npos);
  fs::remove_all(dir);
}

void expect_failure(const std::vector<std::string>& args, const std::string& message_part) {
  const CommandResult r = run_kvdice(args);
  EXPECT_NE(r.exit_code, 0) << "should fail; stderr: " << r.err;
  EXPECT_NE(r.err.find(message_part), std::string::npos) << "stderr was: " << r.err;
}

TEST(Retention, BadInputFailsClearly) {
  const fs::path dir = temp_dir("bad");
  const std::string good =
      write_log(dir / "good.jsonl", header(1, 2), {{0, 2, 0, 10, {{{0, 1, 3}, {0, 1, 4}}}}});
  std::string text;
  {
    std::ifstream in(good);
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  auto write = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir / name) << body;
    return (dir / name).string();
  };
  const std::string truncated = write("truncated.jsonl", text.substr(0, text.size() - 7));
  const std::string no_newline = write("no_newline.jsonl", text.substr(0, text.size() - 1));
  Json h = Json::parse(text.substr(0, text.find('\n')));
  h["version"] = 2;
  const std::string version = write("version.jsonl", h.dump() + "\n" + text.substr(text.find('\n') + 1));
  const std::string legacy = write("legacy.jsonl", text.substr(text.find('\n') + 1));
  const std::string empty = write("empty.jsonl", "");
  const std::string unsorted = write(
      "unsorted.jsonl",
      text.substr(0, text.find('\n') + 1) +
          R"({"sequence":0,"prompt_len":2,"round":0,"at_token":10,"kept_positions":[[[0,3,1],[0,1,4]]]})"
          "\n");
  const std::string shape =
      write("shape.jsonl",
            text.substr(0, text.find('\n') + 1) +
                R"({"sequence":0,"prompt_len":2,"round":0,"at_token":10,"kept_positions":[[[0,1,3]]]})"
                "\n");
  expect_failure({"analyze", "retention", truncated}, "line 2: truncated");
  expect_failure({"analyze", "retention", no_newline}, "line 2: truncated (the last line has no newline");
  expect_failure({"analyze", "retention", version}, "version 2; this kvdice reads version 1");
  expect_failure({"analyze", "retention", legacy}, "not a retention log header");
  expect_failure({"analyze", "retention", empty}, "empty (no header line)");
  expect_failure({"analyze", "retention", unsorted}, "not strictly ascending");
  expect_failure({"analyze", "retention", shape}, "1 KV heads, the header says 2");
  expect_failure({"analyze", "retention", (dir / "missing.jsonl").string()}, "cannot open");
  expect_failure({"analyze", "retention", good, "--heads", "0:2"}, "--heads 0:2 is out of range");
  expect_failure({"analyze", "retention", good, "--heads", "1:0"}, "out of range");
  expect_failure({"analyze", "retention", good, "--heads", "0:0,0:0"}, "given twice");
  expect_failure({"analyze", "retention", good, "--heads", "0-1"}, "not LAYER:HEAD");
  expect_failure({"analyze", "retention", good, "--age-bins", "128,64"}, "strictly increasing");
  expect_failure({"analyze", "retention", good, "--age-bins", "0,64"}, "below 1");
  expect_failure({"analyze", "retention", good, "--age-bins", "12x"}, "not an integer");
  expect_failure({"analyze", "retention", good, "--format", "xml"}, "format");
  expect_failure({"analyze", "retention", good, "--out", "/dev/full"}, "");
  const CommandResult lost = run_kvdice({"analyze", "retention", good}, {}, "/dev/full");
  EXPECT_NE(lost.exit_code, 0);
  // A run that cannot log says so before it decodes anything.
  expect_failure(
      {"eval", "run", "--model", kModel, "--task", "math500", "--dataset",
       std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl", "--results", (dir / "res").string(),
       "--policy", "full", "--limit", "1", "--runs", "1", "-q", "--retention-log", (dir / "x").string()},
      "never evicts");
  expect_failure(
      {"probe", "passcode", "--model", kModel, "--policies", "full", "--retention-log", (dir / "y").string()},
      "none of the policies evicts");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvdice::analyze
