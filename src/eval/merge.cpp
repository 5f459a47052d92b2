#include "eval/merge.h"

#include <map>
#include <optional>

#include "core/error.h"
#include "eval/integrity.h"
#include "eval/results_store.h"

namespace kvdice::eval {
namespace {

struct Source {
  Record record;
  std::string root;  // where it came from, for messages
};

struct CellPlan {
  CellInfo info;
  std::string first_root;
  int inputs = 0;
  int duplicates = 0;
  std::map<std::pair<int, int>, Source> records;
};

std::filesystem::path canonical_db(const std::filesystem::path& root) {
  std::error_code ec;
  auto path = std::filesystem::weakly_canonical(results_db_path(root), ec);
  return ec ? results_db_path(root) : path;
}

// Adds `record` to the plan, or counts it as a duplicate, or fails on a conflicting one.
void take(CellPlan& plan, const Record& record, const std::string& root) {
  const std::pair<int, int> key{record.problem, record.run};
  auto it = plan.records.find(key);
  if (it == plan.records.end()) {
    plan.records.emplace(key, Source{record, root});
    return;
  }
  if (!same_record_content(it->second.record, record))
    fail(
        "cell '{}': problem {} run {} differs between {} and {} (tokens, completion or counts); refusing "
        "to choose one. Remove the wrong copy or rerun that shard into a fresh root.",
        plan.info.name, record.problem, record.run, it->second.root, root);
  ++plan.duplicates;
}

}  // namespace

bool same_record_content(const Record& a, const Record& b) {
  return a.config_hash == b.config_hash && a.stream_id == b.stream_id && a.completion == b.completion &&
         a.tokens_json == b.tokens_json && a.prompt_tokens == b.prompt_tokens &&
         a.generated_tokens == b.generated_tokens && a.finish == b.finish &&
         a.eviction_rounds == b.eviction_rounds && a.peak_resident_slots == b.peak_resident_slots;
}

std::vector<MergedCell> merge_results(const MergeOptions& o, const EvalLog& log) {
  if (o.inputs.empty()) fail("eval merge needs at least one input results root");
  const auto output_db = canonical_db(o.output);
  for (const auto& input : o.inputs)
    if (canonical_db(input) == output_db)
      fail("eval merge: input {} is also the output; merge into another root", input.string());

  CheckOptions shard_check;
  shard_check.allow_incomplete = true;  // a shard holds only its slice
  shard_check.dataset = o.dataset;
  std::map<std::string, CellPlan> plans;
  std::map<std::string, RunInfo> runs;  // run id -> the most complete copy of its row
  for (const auto& input : o.inputs) {
    ResultsStore store(input, false);
    const std::string root = input.string();
    for (RunInfo& run : store.runs()) {
      auto [it, fresh] = runs.try_emplace(run.run_id, run);
      if (!fresh && (run.samples > it->second.samples ||
                     (run.samples == it->second.samples && run.wall_seconds > it->second.wall_seconds)))
        it->second = std::move(run);
    }
    for (const auto& name : store.cell_names()) {
      const CellInfo cell = store.require_cell(name);
      check_cell(store, cell, shard_check);
      auto [it, fresh] = plans.try_emplace(name);
      CellPlan& plan = it->second;
      if (fresh) {
        plan.info = cell;
        plan.first_root = root;
      } else if (cell.config_hash != plan.info.config_hash) {
        const auto diff = manifest_differences(plan.info.manifest, cell.manifest);
        fail("cell '{}' was run with another configuration in {} than in {}; refusing to mix records. "
             "Differences ({} -> {}):\n  {}",
             name, root, plan.first_root, plan.first_root, root, fmt::format("{}", fmt::join(diff, "\n  ")));
      }
      ++plan.inputs;
      for (const Record& r : store.records(name)) take(plan, r, root);
    }
  }
  if (plans.empty()) fail("eval merge: no cells in any input root");

  // The output is created only once every cell has passed.
  std::optional<ResultsStore> existing_out;
  if (std::filesystem::exists(results_db_path(o.output))) existing_out.emplace(o.output, false);
  const std::string out_root = o.output.string();
  std::vector<MergedCell> merged;
  for (auto& [name, plan] : plans) {
    MergedCell m;
    m.name = name;
    m.inputs = plan.inputs;
    m.expected = plan.info.problems * plan.info.runs;
    if (auto existing = existing_out ? existing_out->find_cell(name) : std::nullopt) {
      if (existing->config_hash != plan.info.config_hash) {
        const auto diff = manifest_differences(existing->manifest, plan.info.manifest);
        fail("cell '{}' in the output {} was run with another configuration; refusing to mix records. "
             "Differences (output -> inputs):\n  {}",
             name, out_root, fmt::format("{}", fmt::join(diff, "\n  ")));
      }
      for (const Record& r : existing_out->records(name)) {
        const std::pair<int, int> key{r.problem, r.run};
        auto it = plan.records.find(key);
        if (it == plan.records.end()) {
          plan.records.emplace(key, Source{r, out_root});
          plan.records.at(key).record.cell.clear();  // marks "already in the output"
        } else if (!same_record_content(it->second.record, r)) {
          fail("cell '{}': problem {} run {} differs between {} and the output {}; refusing to choose one.",
               name, r.problem, r.run, it->second.root, out_root);
        } else {
          it->second.record.cell.clear();
          ++plan.duplicates;
        }
      }
    }
    m.records = static_cast<int>(plan.records.size());
    m.duplicates = plan.duplicates;
    if (m.records < m.expected && !o.allow_incomplete) {
      std::vector<std::string> missing;
      for (int p = 0; p < plan.info.problems && missing.size() < 5; ++p)
        for (int run = 0; run < plan.info.runs && missing.size() < 5; ++run)
          if (!plan.records.count({p, run})) missing.push_back(fmt::format("problem {} run {}", p, run));
      fail("cell '{}': the inputs hold {} of its {} records (missing: {}{}); a shard is missing or "
           "unfinished. Rerun it (it resumes), or pass --partial to merge what there is.",
           name, m.records, m.expected, fmt::format("{}", fmt::join(missing, ", ")),
           m.expected - m.records > 5 ? ", ..." : "");
    }
    merged.push_back(m);
  }

  // Everything passed: write, one transaction per cell.
  if (!existing_out) existing_out.emplace(o.output, true);
  ResultsStore& out = *existing_out;
  for (auto& m : merged) {
    CellPlan& plan = plans.at(m.name);
    if (!out.find_cell(m.name))
      out.create_cell(m.name, plan.info.manifest, plan.info.problems, plan.info.runs);
    std::vector<Record> fresh;
    for (auto& [key, source] : plan.records) {
      if (source.record.cell.empty()) continue;
      fresh.push_back(source.record);
    }
    out.insert_records(fresh);
    m.added = static_cast<int>(fresh.size());
    CheckOptions final_check;
    final_check.allow_incomplete = o.allow_incomplete;
    final_check.dataset = o.dataset;
    const auto result = check_cell(out, out.require_cell(m.name), final_check);
    for (const auto& w : result.warnings) log(fmt::format("cell {}: {}", m.name, w));
  }
  // The runs that wrote the records come along: a cell's wall time and device-hours are theirs.
  for (const auto& [id, run] : runs) out.put_run(run);
  if (!runs.empty()) log(fmt::format("carried {} eval run rows into {}", runs.size(), out_root));
  return merged;
}

}  // namespace kvdice::eval
