#include "probe/synth_task.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "core/philox.h"

namespace kvdice::probe {
namespace {

constexpr uint64_t kMaxFillerBytes = uint64_t{64} << 20;
constexpr int kMaxAge = 1 << 22;

// The task's own stream: keyed by the seed, counted by (cell, instance, purpose, draw).
struct TaskRng {
  PhiloxKey key;
  uint32_t cell, instance, purpose;
  uint32_t next = 0;
  uint32_t below(uint32_t range) { return PhiloxStream{key, cell, instance, purpose}.uniform_below(next++, range); }
};

uint32_t cell_stream(const std::string& name) {  // FNV-1a: each cell its own draws, whatever the order
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return h;
}

std::vector<int> encode(const engine::ModelBundle& bundle, const std::string& text) {
  return bundle.tokenizer->encode(text, /*parse_special=*/false);
}

// `n` filler tokens read cyclically from a seeded offset.
void append_filler(std::vector<int>& out, const std::vector<int>& filler, TaskRng& rng, int n) {
  size_t at = rng.below(static_cast<uint32_t>(filler.size()));
  for (int i = 0; i < n; ++i, ++at) out.push_back(filler[at % filler.size()]);
}

}  // namespace

SynthCell parse_synth_cell(const std::string& name) {
  SynthCell cell;
  cell.name = name;
  std::string base = name;
  if (base.ends_with("_once")) {
    cell.variant = SynthVariant::Once;
    base.resize(base.size() - 5);
  } else if (base.ends_with("_two")) {
    cell.variant = SynthVariant::TwoFact;
    base.resize(base.size() - 4);
  }
  if (base == "adeep") {
    cell.age = 4224;
    return cell;
  }
  if (base.ends_with('f')) base.pop_back();  // a768f: the reference's name for the few-rounds cell
  int age = 0;
  const char* first = base.data() + 1;
  const auto [end, ec] = std::from_chars(first, base.data() + base.size(), age);
  if (base.size() < 2 || base[0] != 'a' || ec != std::errc{} || end != base.data() + base.size() || age < 1 ||
      age > kMaxAge) {
    fail("probe synth: unknown cell '{}'; cells are a<AGE> (a768f, a1536, a3072, any a<N> up to {}) or adeep, "
         "optionally with _once or _two",
         name, kMaxAge);
  }
  cell.age = age;
  return cell;
}

std::vector<int> load_filler_tokens(const engine::ModelBundle& bundle, const std::string& path) {
  if (path.empty()) fail("probe synth: --filler FILE is required (configs/synth/filler.txt ships with kvdice)");
  if (!std::filesystem::exists(path)) fail("probe synth: --filler {}: no such file", path);
  const std::string text = read_regular_file(path, kMaxFillerBytes);
  std::vector<int> tokens = encode(bundle, text);
  if (tokens.size() < 64) fail("probe synth: --filler {} holds {} tokens; at least 64 are needed", path, tokens.size());
  return tokens;
}

SynthTask build_synth_task(const engine::ModelBundle& bundle, const SynthTaskConfig& config, const SynthCell& cell,
                           int64_t max_context) {
  if (config.instances < 1) fail("probe synth: --instances must be >= 1 (got {})", config.instances);
  if (config.instances > 4000) fail("probe synth: --instances {} above 4000 (values are drawn from 5000 4-digit numbers)", config.instances);
  if (config.pre_tokens < 0) fail("probe synth: --pre must be >= 0 (got {})", config.pre_tokens);
  const std::vector<int> filler = load_filler_tokens(bundle, config.filler_path);
  const std::string filler_text = read_regular_file(config.filler_path, kMaxFillerBytes);

  const auto kind = engine::resolve_chat_template(bundle, config.chat_template);
  if (!config.enable_thinking && !tokenizer::has_thinking_switch(kind))
    fail("probe synth: --no-think: the {} chat template has no thinking switch (only qwen3 does)",
         tokenizer::chat_template_name(kind));
  std::vector<int> stub = engine::encode_chat_prompt(
      bundle, kind, "Read the notes that follow carefully; a question about them comes at the end.", "",
      config.enable_thinking);
  if (kind == tokenizer::ChatTemplate::Qwen3 && config.enable_thinking) {
    const std::vector<int> open = bundle.tokenizer->encode("<think>\n", /*parse_special=*/true);
    stub.insert(stub.end(), open.begin(), open.end());
  }

  const int n_facts = cell.variant == SynthVariant::TwoFact ? 2 : 1;
  const char* kNames[2] = {"red", "blue"};
  auto box_text = [&](int fact, const std::string& value) {
    if (cell.variant == SynthVariant::Once) return fmt::format("IMPORTANT: the passcode is {}. Remember it.\n\n", value);
    if (n_facts == 2) return fmt::format("\nNote: the {} code is {}.\n", kNames[fact], value);
    return fmt::format("\nNote: the vault code is {}.\n", value);
  };

  if (config.instances * n_facts > 5000)
    fail("probe synth: cell {}: {} instances x {} facts need more distinct values than the 5000 in [5000, 9999]",
         cell.name, config.instances, n_facts);
  SynthTask task;
  task.cell = cell;
  const PhiloxKey key = philox_key(config.seed, 0, RngDomain::Sampling);
  const uint32_t cs = cell_stream(cell.name);

  // Values: distinct, in [5000, 9999], and (screened) nowhere in the filler text.
  std::set<std::string> used;
  std::vector<std::vector<std::string>> values(config.instances);
  for (int i = 0; i < config.instances; ++i) {
    TaskRng rng{key, cs, static_cast<uint32_t>(i), 1};
    for (int f = 0; f < n_facts; ++f) {
      std::string v;
      for (int attempt = 0;; ++attempt) {
        if (attempt == 100000)
          fail("probe synth: no 4-digit value in [5000, 9999] is left that the filler {} does not contain",
               config.filler_path);
        v = std::to_string(5000 + rng.below(5000));
        if (used.count(v)) continue;
        if (config.screen_values && filler_text.find(v) != std::string::npos) continue;
        break;
      }
      used.insert(v);
      values[i].push_back(v);
    }
  }

  // Box lengths: the longest over instances, shorter boxes padded with newlines, so that every instance
  // holds its boxes at the same absolute positions.
  const std::vector<int> pad = encode(bundle, "\n");
  std::vector<std::vector<std::vector<int>>> boxes(config.instances);
  int box_len = 0;
  for (int i = 0; i < config.instances; ++i) {
    for (int f = 0; f < n_facts; ++f) {
      boxes[i].push_back(encode(bundle, box_text(f, values[i][f])));
      box_len = std::max(box_len, static_cast<int>(boxes[i][f].size()));
    }
  }
  const int gap = n_facts == 2 ? config.two_fact_gap : 0;
  const int boxes_span = n_facts * box_len + gap;
  if (cell.age <= boxes_span)
    fail("probe synth: cell {}: age {} does not reach past its fact box(es) ({} tokens); use a longer age", cell.name,
         cell.age, boxes_span);
  const int32_t lo = static_cast<int32_t>(stub.size()) + config.pre_tokens;
  task.spans.emplace_back(lo, lo + box_len);
  if (n_facts == 2) task.spans.emplace_back(lo + box_len + gap, lo + 2 * box_len + gap);

  for (int i = 0; i < config.instances; ++i) {
    TaskRng rng{key, cs, static_cast<uint32_t>(i), 2};
    SynthInstance inst;
    inst.values = values[i];
    inst.prompt = stub;
    std::vector<int>& forced = inst.forced;
    append_filler(forced, filler, rng, config.pre_tokens);
    for (int f = 0; f < n_facts; ++f) {
      const std::vector<int>& box = boxes[i][f];
      forced.insert(forced.end(), box.begin(), box.end());
      for (size_t k = box.size(); k < static_cast<size_t>(box_len); ++k) forced.push_back(pad.back());
      if (f == 0 && n_facts == 2) append_filler(forced, filler, rng, gap);
    }
    append_filler(forced, filler, rng, cell.age - boxes_span);
    inst.query_step = static_cast<int>(forced.size());
    // The query and the values, encoded as one text so the value tokens are the tokenizer's own.
    std::string tail;
    std::vector<std::pair<std::string, std::string>> parts;
    if (cell.variant == SynthVariant::Once) {
      parts = {{"\n\nWhat was the passcode again? The passcode is ", inst.values[0]}};
    } else if (n_facts == 2) {
      parts = {{"\n\nQuestion: what are the two codes? Answer: the red code is ", inst.values[0]},
               {" and the blue code is ", inst.values[1]}};
    } else {
      parts = {{"\n\nQuestion: what is the vault code? Answer: the vault code is ", inst.values[0]}};
    }
    std::vector<int> done;  // tokens of `tail` so far
    for (const auto& [text, value] : parts) {
      tail += text;
      const std::vector<int> before = encode(bundle, tail);
      tail += value;
      const std::vector<int> after = encode(bundle, tail);
      if (after.size() <= before.size() || !std::equal(before.begin(), before.end(), after.begin()) ||
          before.size() < done.size() || !std::equal(done.begin(), done.end(), before.begin()))
        fail("probe synth: the tokenizer merges the value {} with the query text around it", value);
      forced.insert(forced.end(), before.begin() + static_cast<long>(done.size()), before.end());
      for (size_t k = before.size(); k < after.size(); ++k) {
        inst.value_steps.push_back(static_cast<int>(forced.size()));
        forced.push_back(after[k]);
      }
      done = after;
    }
    const int64_t total = static_cast<int64_t>(inst.prompt.size() + forced.size());
    task.longest = std::max(task.longest, total);
    task.instances.push_back(std::move(inst));
  }
  if (task.longest > max_context)
    fail("probe synth: cell {} needs {} tokens ({}-token stub + --pre {} + age {} + query), longer than the "
         "longest context of {}; use a shorter age or --pre",
         cell.name, task.longest, stub.size(), config.pre_tokens, cell.age, max_context);
  return task;
}

}  // namespace kvdice::probe
