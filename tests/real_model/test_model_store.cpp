// Model store: hashing, name resolution, and the verify-once cache marker (on a hard link to the
// pulled default model, so nothing is downloaded twice).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>

#include "core/error.h"
#include "model/model_store.h"
#include "real_model/real_model_cache.h"

namespace kvdice::model {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const fs::path& parent = fs::temp_directory_path()) {
    path_ = parent / ("kvdice-store-test-" + std::to_string(getpid()) + "-" +
                      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Expected digests are the FIPS 180-2 test vectors, not values computed by this code.
TEST(ModelStore, Sha256MatchesFipsVectors) {
  TempDir dir;
  write_file(dir.path() / "empty", "");
  write_file(dir.path() / "abc", "abc");
  write_file(dir.path() / "million_a", std::string(1000000, 'a'));  // spans several read buffers
  EXPECT_EQ(sha256_file(dir.path() / "empty"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_file(dir.path() / "abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_file(dir.path() / "million_a"),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_THROW(sha256_file(dir.path() / "missing"), Error);
}

TEST(ModelStore, TableEntriesAreWellFormed) {
  std::set<std::string> names, files;
  for (const KnownModel& m : known_models()) {
    EXPECT_TRUE(names.insert(m.name).second) << m.name;
    EXPECT_TRUE(files.insert(m.file_name).second) << m.file_name;
    EXPECT_EQ(m.sha256.size(), 64u) << m.name;
    EXPECT_EQ(m.sha256.find_first_not_of("0123456789abcdef"), std::string::npos) << m.name;
    EXPECT_GT(m.size, 0u) << m.name;
    ASSERT_FALSE(m.chunks.empty()) << m.name;
    for (const ModelChunk& c : m.chunks) {
      EXPECT_FALSE(c.version.empty()) << c.package;
      EXPECT_NE(c.member.find("/data/"), std::string::npos) << c.member;
    }
  }
  const KnownModel* def = find_known_model("default");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->name, "qwen2.5-coder-0.5b-instruct");
  EXPECT_EQ(find_known_model(def->name), def);
  EXPECT_EQ(find_known_model("no-such-model"), nullptr);
}

TEST(ModelStore, UnknownNameIsAnErrorListingKnownNames) {
  TempDir home;
  try {
    pull_model("no-such-model", home.path());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("no-such-model"), std::string::npos) << message;
    EXPECT_NE(message.find("default"), std::string::npos) << message;
    EXPECT_NE(message.find("qwen2.5-coder-0.5b-instruct"), std::string::npos) << message;
  }
  EXPECT_THROW(resolve_model_path("no/such/file.gguf", home.path()), Error);
  EXPECT_FALSE(fs::exists(home.path() / "models" / "no-such-model"));
}

TEST(ModelStore, ExistingPathsResolveToThemselves) {
  TempDir dir;
  const fs::path file = dir.path() / "some.gguf";
  write_file(file, "not really a model");
  // A cache dir that does not exist proves nothing is fetched or created for a path.
  const fs::path home = dir.path() / "home";
  EXPECT_EQ(resolve_model_path(file.string(), home), file);
  EXPECT_EQ(resolve_model_path(dir.path().string(), home), dir.path());
  EXPECT_FALSE(fs::exists(home));
}

// A cached copy is hashed once, recorded in a sha256sum-style marker, trusted while the marker is at
// least as new as the file, and re-hashed when the file changes after it.
TEST(ModelStore, CachedCopyIsVerifiedOnceThenTrustedUntilItChanges) {
  const fs::path real = kvdice::testing::default_model_path();
  const KnownModel& def = *find_known_model("default");
  // The temporary home sits inside the real cache so a hard link (same file system) stands in for a
  // fresh download.
  TempDir home(kvdice::testing::real_model_home());
  const fs::path models = home.path() / "models";
  fs::create_directories(models);
  const fs::path copy = models / def.file_name;
  fs::create_hard_link(real, copy);
  const fs::path marker = models / (def.file_name + ".sha256");
  ASSERT_FALSE(fs::exists(marker));

  std::vector<std::string> lines;
  auto progress = [&](const std::string& line) { lines.push_back(line); };
  EXPECT_EQ(pull_model("default", home.path(), progress), copy);
  ASSERT_TRUE(fs::exists(marker));
  std::ifstream in(marker);
  std::string recorded, name;
  in >> recorded >> name;
  EXPECT_EQ(recorded, def.sha256);
  EXPECT_EQ(name, def.file_name);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("verifying sha256"), std::string::npos) << lines[0];

  lines.clear();
  EXPECT_EQ(pull_model("default", home.path(), progress), copy);
  EXPECT_TRUE(lines.empty()) << "a vouched-for copy should not be hashed again";

  // A file touched after its marker is no longer vouched for.
  fs::last_write_time(marker, fs::last_write_time(copy) - std::chrono::hours(1));
  lines.clear();
  EXPECT_EQ(resolve_model_path("default", home.path(), progress), copy);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("verifying sha256"), std::string::npos) << lines[0];
  EXPECT_GE(fs::last_write_time(marker), fs::last_write_time(copy));
  EXPECT_FALSE(fs::exists(models / (def.file_name + ".partial")));
}

}  // namespace
}  // namespace kvdice::model
