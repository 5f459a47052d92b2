// kvdice's math grader against the field's on a committed corpus of hard cases
// (tests/fixtures/eval/math_verify_pairs.jsonl, written by tools/eval/make_math_pairs.py): each pair is
// a completion, the gold answer, its class, the verdicts of Hugging Face's math-verify 0.9.0
// ("math_verify") and of the paper harness's grader ("reference", tools/eval/add_reference_verdicts.py),
// both recorded by running them, and the verdict that is right ("expected"), with the argument ("why")
// wherever it differs from either. The test grades each completion as `eval grade` does (the last
// \boxed{} or \fbox{}, then math_equal) and requires kvdice's verdict to be the expected one on every
// pair; it prints the agreement with math-verify and with the reference per class.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <vector>

#include "core/json.h"
#include "eval/math_answer.h"

namespace kvdice::eval {
namespace {

struct Pair {
  std::string cls, completion, gold, why;
  bool math_verify = false, reference = false, expected = false;
};

std::vector<Pair> load_pairs() {
  std::ifstream in(std::string(KVDICE_FIXTURES_DIR) + "/eval/math_verify_pairs.jsonl");
  std::vector<Pair> pairs;
  std::string line;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line);
    pairs.push_back({j["class"], j["completion"], j["gold"], j.value("why", std::string()), j["math_verify"],
                     j["reference"], j["expected"]});
  }
  return pairs;
}

bool kvdice_verdict(const std::string& completion, const std::string& gold) {
  const auto boxed = last_boxed(completion);
  return boxed && math_equal(*boxed, gold, 5.0).equal;
}

const char* word(bool equal) { return equal ? "equal" : "different"; }

TEST(MathPairs, EveryVerdictIsTheArguedOne) {
  const auto pairs = load_pairs();
  ASSERT_GE(pairs.size(), 500u);
  struct Counts {
    int total = 0, math_verify = 0, reference = 0, expected = 0;
  };
  std::map<std::string, Counts> per_class;
  Counts all;
  std::string wrong, with_math_verify, with_reference;
  for (const auto& p : pairs) {
    const bool ours = kvdice_verdict(p.completion, p.gold);
    for (Counts* c : {&per_class[p.cls], &all}) {
      ++c->total;
      c->math_verify += ours == p.math_verify;
      c->reference += ours == p.reference;
      c->expected += ours == p.expected;
    }
    const std::string shown = fmt::format("[{}] {} vs gold {}: kvdice {}, math-verify {}, reference {}",
                                          p.cls, Json(p.completion).dump(), Json(p.gold).dump(), word(ours),
                                          word(p.math_verify), word(p.reference));
    if (ours != p.expected) wrong += "  " + shown + ", expected " + word(p.expected) + "\n";
    if (ours != p.math_verify) with_math_verify += "  " + shown + "\n";
    if (ours != p.reference) with_reference += "  " + shown + "\n";
  }
  std::string table = "class: pairs, agree with math-verify, with the reference, with the expected verdict\n";
  for (const auto& [cls, c] : per_class)
    table += fmt::format("  {}: {}, {}, {}, {}\n", cls, c.total, c.math_verify, c.reference, c.expected);
  std::cout << table
            << fmt::format("all: {} pairs; math-verify {} ({:.1f}%), reference {} ({:.1f}%), expected {}\n",
                           all.total, all.math_verify, 100.0 * all.math_verify / all.total, all.reference,
                           100.0 * all.reference / all.total, all.expected)
            << "disagreements with math-verify:\n"
            << with_math_verify << "disagreements with the reference:\n"
            << with_reference;
  EXPECT_EQ(all.expected, all.total) << "pairs where kvdice's verdict is not the argued one:\n" << wrong;
}

TEST(MathPairs, EveryDisagreementWithTheFieldIsArgued) {
  const auto pairs = load_pairs();
  ASSERT_GE(pairs.size(), 500u);
  std::string unargued;
  std::map<std::pair<std::string, std::string>, int> seen;
  for (const auto& p : pairs) {
    if ((p.expected != p.math_verify || p.expected != p.reference) && p.why.empty())
      unargued += fmt::format("  {} vs gold {}\n", Json(p.completion).dump(), Json(p.gold).dump());
    EXPECT_EQ(++seen[std::make_pair(p.completion, p.gold)], 1)
        << "duplicate pair " << p.completion << " / " << p.gold;
  }
  EXPECT_TRUE(unargued.empty()) << "pairs whose expected verdict differs from math-verify's or the "
                                   "reference's without a \"why\":\n"
                                << unargued;
}

}  // namespace
}  // namespace kvdice::eval
