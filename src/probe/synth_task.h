// The synthetic-retrieval task (docs/mechanism.md, "Synthetic retrieval"): seeded instances in which a
// fact with a 4-digit value is planted at a fixed token position inside filler text, and a query a
// chosen number of tokens later asks for it. Everything after a short prefill stub is teacher-forced,
// so no prompt protection ever covers the fact; the value tokens at the end are what is scored.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/model_bundle.h"

namespace kvdice::probe {

enum class SynthVariant {
  Single,  // one fact box, asked for once
  Once,    // the once-only passcode wording ("IMPORTANT: the passcode is NNNN. Remember it.")
  TwoFact  // two fact boxes a fixed gap apart, both values asked for
};

// A cell: a variant and the age (tokens from the first fact box's start to the query's start).
// Names: a768f, a1536, a3072, adeep (= a4224: 57 rounds at T=1088, r=64), any a<N>, each optionally
// with a _once or _two suffix (a1536_two, adeep_once).
struct SynthCell {
  std::string name;
  int age = 0;
  SynthVariant variant = SynthVariant::Single;
};
// Error naming the cell and the accepted forms.
SynthCell parse_synth_cell(const std::string& name);

struct SynthTaskConfig {
  std::string filler_path;     // text the filler tokens are cut from
  int pre_tokens = 448;        // filler before the (first) fact box
  int two_fact_gap = 256;      // filler between the two boxes of a _two cell
  int instances = 32;          // per cell
  uint64_t seed = 20260723;    // values and filler offsets
  bool enable_thinking = true;
  std::string chat_template;   // override; empty = detect
  bool screen_values = true;   // values whose digits occur in the filler are redrawn (off only to test it)
};

struct SynthInstance {
  std::vector<std::string> values;  // the planted 4-digit values (two for a _two cell)
  std::vector<int> prompt;          // chat-templated stub, prefilled
  std::vector<int> forced;          // filler, boxes, filler, query and value tokens, teacher-forced
  std::vector<int> value_steps;     // indices into `forced` of the scored value tokens
  int query_step = 0;               // index into `forced` where the query text starts
};

struct SynthTask {
  SynthCell cell;
  // [lo, hi) absolute positions of each fact box (the same for every instance of the cell): what a pin
  // arm keeps or drops.
  std::vector<std::pair<int32_t, int32_t>> spans;
  std::vector<SynthInstance> instances;
  int64_t longest = 0;  // prompt + forced tokens of the longest instance
};

// The filler's tokens; Error naming the file when it cannot be read or holds fewer than 64 tokens.
std::vector<int> load_filler_tokens(const engine::ModelBundle& bundle, const std::string& path);

// Builds one cell's instances deterministically from the seed. Error when the age is too short for the
// boxes, or prompt + forced tokens exceed `max_context`.
SynthTask build_synth_task(const engine::ModelBundle& bundle, const SynthTaskConfig& config, const SynthCell& cell,
                           int64_t max_context);

}  // namespace kvdice::probe
