#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "policy/cuda_selection.h"
#include "policy/eviction_policy.h"
#include "policy/policy_options.h"

namespace kvdice::policy {
namespace {

const std::vector<std::string> kExpected{
    "full",          "random_pp",       "random",   "random_shared", "recency_pp",  "recency",
    "streaming",     "random_block_pp", "random_pp_rec", "random_pin_pp", "carrier_mix", "carrier_softmix",
    "anti_mix",      "anti_softmix",    "random_vrange_pp", "snapkv",   "snapkv_pp",     "h2o",         "h2o_pp",
    "vase",          "vase_pp",         "rkv",      "rkv_pp",        "rkv_official", "triattention"};

TEST(Registry, ListsEveryPolicyAndBuildsEach) {
  EXPECT_EQ(policy_names(), kExpected);
  for (const std::string& name : kExpected) {
    if (name == "triattention") continue;  // needs a statistics file (test_triattention_calibration)
    auto policy = make_policy(name);
    ASSERT_NE(policy, nullptr);
    EXPECT_EQ(policy->name(), name);
    EXPECT_FALSE(policy->summary().empty());
    const bool scores = name.starts_with("snapkv") || name.starts_with("h2o") || name.starts_with("vase") ||
                        name.starts_with("rkv") || name == "random_vrange_pp";
    EXPECT_EQ(policy->needs().any(), scores) << name << ": only policies that rank by a signal need one recorded";
  }
}

TEST(Registry, ProtectionAndEvictionFlags) {
  EXPECT_FALSE(make_policy("full")->evicts());
  for (const char* name : {"random_pp", "random_shared", "recency_pp"})
    EXPECT_TRUE(make_policy(name)->protects_prompt());
  for (const char* name : {"random", "recency", "streaming"}) {
    EXPECT_FALSE(make_policy(name)->protects_prompt());
    EXPECT_TRUE(make_policy(name)->evicts());
  }
}

TEST(Registry, UnknownNameListsKnownNames) {
  try {
    make_policy("random_ppp");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'random_ppp'"), std::string::npos) << message;
    for (const std::string& name : kExpected) EXPECT_NE(message.find(name), std::string::npos) << message;
  }
}

TEST(Registry, OptionsAreParsedDefaultedAndDescribed) {
  EXPECT_EQ(describe(*make_policy("random_block_pp")), "random_block_pp:block=32,grid=slot0");
  EXPECT_EQ(describe(*make_policy("random_block_pp:block=8,grid=candidates")),
            "random_block_pp:block=8,grid=candidates");
  EXPECT_EQ(describe(*make_policy("random_pp_rec")), "random_pp_rec:recent=0.5");
  EXPECT_EQ(describe(*make_policy("random_pp")), "random_pp");
  for (const char* bad : {"random_block_pp:block=0", "random_block_pp:block=x", "random_block_pp:size=8",
                          "random_block_pp:block", "random_pp:block=8", "random_pp_rec:recent=1.5",
                          "random_block_pp:block=8,block=9", "random_block_pp:grid=prompt"}) {
    EXPECT_THROW(make_policy(bad), Error) << bad;
  }
}

// Every evicting policy has a CUDA file: launchers in a CUDA build, refused by name (with the
// missing file named) without one.
TEST(Registry, ScoringPoliciesWithCudaFiles) {
  for (const char* name : {"snapkv", "snapkv_pp", "rkv", "rkv_pp", "vase", "vase_pp", "triattention",
                           "random_block_pp", "random_pp_rec", "rkv_official", "h2o", "h2o_pp"}) {
#ifdef KVDICE_WITH_CUDA
    EXPECT_NE(cuda_selection(name), nullptr) << name;
    EXPECT_NO_THROW(require_cuda_selection(name)) << name;
#else
    EXPECT_EQ(cuda_selection(name), nullptr) << name;
    try {
      require_cuda_selection(name);
      ADD_FAILURE() << name << " accepted on CUDA in a build without CUDA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA selection"), std::string::npos) << e.what();
    }
#endif
  }
  // Only the whole-model policy has a round scorer.
#ifdef KVDICE_WITH_CUDA
  EXPECT_NE(cuda_round_scorer("triattention"), nullptr);
  EXPECT_NE(cuda_round_scorer("triattention:stats=x"), nullptr);
#endif
  EXPECT_EQ(cuda_round_scorer("snapkv"), nullptr);
  EXPECT_EQ(cuda_round_scorer("random_pp"), nullptr);
}

TEST(Registry, RkvOptionsAndDefaults) {
  EXPECT_EQ(describe(*make_policy("rkv")), "rkv:lambda=0.5,pool=5,temperature=1");
  EXPECT_EQ(describe(*make_policy("rkv_pp:lambda=0.3")), "rkv_pp:lambda=0.3,pool=5,temperature=1");
  EXPECT_EQ(describe(*make_policy("rkv_official")), "rkv_official:lambda=0.1,queries=8,pool=7,threshold=0.5");
  EXPECT_TRUE(make_policy("rkv_pp")->protects_prompt());
  EXPECT_FALSE(make_policy("rkv")->protects_prompt());
  EXPECT_FALSE(make_policy("rkv_official")->protects_prompt());
  for (const char* bad : {"rkv:lambda=1.5", "rkv:pool=4", "rkv_official:queries=0",
                          "rkv_official:threshold=2", "rkv_official:temperature=1"})
    EXPECT_THROW(make_policy(bad), Error) << bad;
}

// The registry names each policy's CUDA file, in every build: the file exists, a policy and its
// prompt-protecting twin share one, and "full" (which never evicts) has none.
TEST(Registry, NamesEachPolicysCudaFile) {
  const std::filesystem::path dir = std::filesystem::path(KVDICE_SOURCE_DIR) / "src" / "policy" / "cuda";
  for (const std::string& name : policy_names()) {
    const std::string_view file = cuda_file(name);
    if (name == "full") {
      EXPECT_TRUE(file.empty());
      continue;
    }
    EXPECT_TRUE(std::filesystem::exists(dir / (std::string(file) + ".cu"))) << name << ": " << file;
  }
  EXPECT_EQ(cuda_file("snapkv_pp"), "snapkv");
  EXPECT_EQ(cuda_file("random"), "random_pp");
  EXPECT_EQ(cuda_file("anti_softmix"), "carrier_mix");
  EXPECT_EQ(cuda_file("rkv_pp:lambda=0.3"), "rkv");
  EXPECT_TRUE(cuda_file("no_such_policy").empty());
}

// What a CUDA file's binder reads: options stated in a described spec, never a silent default.
TEST(Registry, StatedOptionsAreRequiredByValue) {
  PolicyOptions options(describe(*make_policy("rkv_official:lambda=0.25")));
  EXPECT_EQ(options.require_double("lambda"), 0.25);
  EXPECT_EQ(options.require_int("queries"), 8);
  EXPECT_EQ(options.require_double("threshold"), 0.5);
  PolicyOptions block(describe(*make_policy("random_block_pp:grid=candidates")));
  EXPECT_EQ(block.require_string("grid"), "candidates");
  try {
    block.require_int("pool");
    ADD_FAILURE() << "an option the spec does not state was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pool"), std::string::npos) << e.what();
  }
  PolicyOptions bad("random_block_pp:block=x");
  EXPECT_THROW(bad.require_int("block"), Error);
}

// The windowed attention's precision option of snapkv, rkv and vase (and _pp): fp64 by default and then
// absent from the description (records of earlier runs stay comparable), fp32 stated (the CUDA files
// bind it: CudaPolicyParams.EveryOptionReachesItsCudaFile); anything else is refused naming the policy
// and the value.
TEST(Registry, WindowPrecisionOption) {
  for (const char* name : {"snapkv", "snapkv_pp", "rkv", "rkv_pp", "vase", "vase_pp"}) {
    const std::string plain = describe(*make_policy(name));
    EXPECT_EQ(plain.find("precision"), std::string::npos) << plain;
    EXPECT_EQ(describe(*make_policy(std::string(name) + ":precision=fp64")), plain);
    const auto fp32 = make_policy(std::string(name) + ":precision=fp32");
    EXPECT_EQ(describe(*fp32), plain + ",precision=fp32");
    try {
      make_policy(std::string(name) + ":precision=bf16");
      ADD_FAILURE() << name << " accepted precision=bf16";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find("precision=bf16"), std::string::npos) << what;
    }
  }
  EXPECT_THROW(make_policy("h2o:precision=fp32"), Error);  // only the windowed attention has it
}

TEST(Registry, FullRefusesToSelect) {
  auto full = make_policy("full");
  SelectionInput input;
  std::vector<uint8_t> keep;
  EXPECT_THROW(full->select(input, keep), Error);
}

}  // namespace
}  // namespace kvdice::policy
