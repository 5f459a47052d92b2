// Bad-input matrices for the core mechanisms every reader and writer goes through: special files
// (docs/hardening.md class 3), checked writes (class 4), strict JSON (classes 2 and 5) and message escaping
// (class 6). Each row is one input a hostile or careless user could supply.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "error_text.h"

namespace kvdice {
namespace {
namespace fs = std::filesystem;

// A per-test scratch directory; a guard against hangs (a FIFO read without O_NONBLOCK blocks for ever):
// SIGALRM ends the binary, so a regression fails instead of stalling CI.
class HardeningCore : public ::testing::Test {
 protected:
  void SetUp() override {
    ::alarm(60);
    dir_ = fs::temp_directory_path() / ("kvdice_hardening_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    ::alarm(0);
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

using test::error_of;
using test::has;

TEST_F(HardeningCore, SpecialFilesAreRefusedByNameWithoutBlocking) {
  const fs::path fifo = dir_ / "config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path socket_path = dir_ / "sock";
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const fs::path link_to_fifo = dir_ / "link.json";
  fs::create_symlink(fifo, link_to_fifo);

  struct Row {
    fs::path path;
    std::string kind;
  };
  const Row rows[] = {{fifo, "a FIFO"},
                      {link_to_fifo, "a FIFO"},
                      {dir_, "a directory"},
                      {"/dev/zero", "a character device"},
                      {"/dev/null", "a character device"},
                      {dir_ / "missing.json", "No such file"}};
  for (const Row& row : rows) {
    SCOPED_TRACE(row.path.string());
    // Every reader kvdice has: mmap (checkpoints), whole-file reads (JSON, templates).
    for (const std::string& message :
         {error_of([&] { MappedFile file(row.path); }), error_of([&] { read_json_file(row.path); }),
          error_of([&] { read_regular_file(row.path, 1 << 20); })}) {
      EXPECT_TRUE(has(message, row.path.string())) << message;
      EXPECT_TRUE(has(message, row.kind)) << message;
    }
  }
  // A socket is refused at open (ENXIO) or at the type check; either way by name, never read.
  const std::string socket_error = error_of([&] { MappedFile file(socket_path); });
  EXPECT_TRUE(has(socket_error, socket_path.string())) << socket_error;
  ::close(sock);
}

TEST_F(HardeningCore, ReadsAreBounded) {
  const fs::path big = dir_ / "big.json";
  std::ofstream(big) << std::string(4096, ' ') << "{}";
  EXPECT_TRUE(has(error_of([&] { read_regular_file(big, 1024); }), "larger than the 1024 byte limit"));
  EXPECT_EQ(read_regular_file(big, 1 << 20).size(), 4098u);
  // A user-named stream (a prompt file) may be a device, but it is still bounded.
  EXPECT_TRUE(has(error_of([&] { read_user_text_file("/dev/zero", 1 << 16); }), "byte limit"));
  EXPECT_EQ(read_user_text_file("/dev/null", 1 << 16), "");
}

TEST_F(HardeningCore, AtomicFileNeverLeavesHalfAFile) {
  const fs::path target = dir_ / "out.json";
  std::ofstream(target) << "old";
  {
    AtomicFile file(target);
    file.write("new content");
    // Before commit a reader still sees the old file whole.
    std::ifstream in(target);
    std::string seen((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(seen, "old");
  }  // destroyed without commit: the old file stays, no temporary is left behind
  EXPECT_EQ(read_regular_file(target, 100), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);

  write_file_atomically(target, "new");
  EXPECT_EQ(read_regular_file(target, 100), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(HardeningCore, LostWritesAreErrors) {
  // /dev/full: every write fails with ENOSPC. It is a device, so it is written in place, not renamed over.
  const std::string full = error_of([] { write_file_atomically("/dev/full", std::string(1 << 16, 'x')); });
  EXPECT_TRUE(has(full, "/dev/full")) << full;
  EXPECT_TRUE(has(full, "No space left")) << full;
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
  // Unwritable destinations.
  EXPECT_TRUE(
      has(error_of([&] { write_file_atomically(dir_ / "no" / "such" / "dir.json", "x"); }), "cannot write"));
  EXPECT_TRUE(has(error_of([&] { write_file_atomically(dir_, "x"); }), "directory"));
}

TEST(HardeningJson, DuplicateKeysAreRefusedAtEveryDepth) {
  EXPECT_TRUE(has(error_of([] { parse_json_text(R"({"a": 1, "a": 2})", "x.json"); }), "duplicate key 'a'"));
  EXPECT_TRUE(has(error_of([] { parse_json_text(R"({"t": {"dtype": "F32", "dtype": "BF16"}})", "x.json"); }),
                  "duplicate key 'dtype'"));
  EXPECT_TRUE(has(error_of([] { parse_json_text(R"([{"k": 1}, {"k": 2, "k": 3}])", "x.json"); }),
                  "duplicate key 'k'"));
  // The same key in sibling objects is fine.
  EXPECT_NO_THROW(parse_json_text(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}]})", "x.json"));
  EXPECT_TRUE(has(error_of([] { parse_json_text("{\"a\": ", "x.json"); }), "x.json: invalid JSON"));
}

TEST(HardeningJson, IntegersAreNeverNarrowedOrInvented) {
  struct Row {
    const char* json;
    const char* expected;  // part of the error, or "" when the value is accepted as 7
  };
  const Row rows[] = {
      {"7", ""},
      {"4294967298", "outside the supported range"},  // 2^32 + 2: was read as 2
      {"1000000000000", "outside the supported range"},
      {"-2147483649", "outside the supported range"},
      {"18446744073709551615", "outside the supported range"},
      {"1e12", "must be an integer"},
      {"7.0", "must be an integer"},
      {"7.5", "must be an integer"},
      {"true", "must be an integer"},  // nlohmann would give 1
      {"\"7\"", "must be an integer"},
      {"[7]", "must be an integer"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.json);
    const Json object = Json::parse(std::string("{\"n\": ") + row.json + "}");
    if (*row.expected == '\0') {
      EXPECT_EQ(json_require<int>(object, "n", "c.json"), 7);
      continue;
    }
    const std::string message = error_of([&] { json_require<int>(object, "n", "c.json"); });
    EXPECT_TRUE(has(message, row.expected)) << message;
    EXPECT_TRUE(has(message, "c.json: field 'n'")) << message;
  }
  // 64-bit fields take 64-bit values; floats refuse bools, strings and values beyond their range.
  EXPECT_EQ(json_require<int64_t>(Json::parse(R"({"n": 4294967298})"), "n", "c"), 4294967298);
  EXPECT_TRUE(
      has(error_of([] { json_require<float>(Json::parse(R"({"x": 1e300})"), "x", "c"); }), "32-bit float"));
  EXPECT_TRUE(has(error_of([] { json_require<float>(Json::parse(R"({"x": true})"), "x", "c"); }),
                  "must be a number"));
  EXPECT_TRUE(
      has(error_of([] { json_require<bool>(Json::parse(R"({"b": 1})"), "b", "c"); }), "true or false"));
  EXPECT_TRUE(has(error_of([] { json_get_or<std::string>(Json::parse(R"({"s": 1})"), "s", "", "c"); }),
                  "must be a string"));
}

TEST(HardeningMessages, ControlBytesAndBrokenUtf8AreEscaped) {
  // What fail() does to every string argument.
  const std::string hostile("key\0tail\x1b[2J\r\xff\xc3(", 16);
  const std::string message = error_of([&] { fail("metadata {} is bad", hostile); });
  EXPECT_EQ(message, "metadata key\\x00tail\\x1b[2J\\x0d\\xff\\xc3( is bad");
  // Valid UTF-8, newlines and tabs pass unchanged; escaping is idempotent.
  EXPECT_EQ(escape_for_message("héllo ✓ 😀\n\tx"), "héllo ✓ 😀\n\tx");
  EXPECT_EQ(escape_for_message(escape_for_message(hostile)), escape_for_message(hostile));
  // Overlong encodings, surrogates and code points above U+10FFFF are not valid UTF-8.
  EXPECT_EQ(escape_for_message("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(escape_for_message("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(escape_for_message("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(escape_for_message("\x7f"), "\\x7f");
}

TEST(HardeningMessages, QuotedInputIsCappedAtOneKibibyte) {
  // One bit flip in a GGUF once made a 1.2 GB error line: no argument of fail() is quoted past 1 KiB.
  const std::string huge(10'000'000, 'a');
  const std::string message = error_of([&] { fail("metadata key {} is bad", huge); });
  EXPECT_LT(message.size(), kMaxQuotedBytes + 200);
  EXPECT_TRUE(has(message, "... (10000000 bytes in all) is bad")) << message.substr(message.size() - 80);
  // Quoting a quoted text changes nothing; a text just over the cap is kept whole.
  const std::string quoted = quote_for_message(huge);
  EXPECT_EQ(quote_for_message(quoted), quoted);
  const std::string short_enough(kMaxQuotedBytes + 10, 'b');
  EXPECT_EQ(quote_for_message(short_enough), short_enough);
  // A parser's own excerpt (nlohmann quotes the token it read) is capped too.
  const std::string long_token = "[" + std::string(5'000'000, '1') + "x]";
  const std::string parse_message = error_of([&] { parse_json_text(long_token, "big.json"); });
  EXPECT_LT(parse_message.size(), 4 * kMaxQuotedBytes);
  EXPECT_TRUE(has(parse_message, "big.json")) << parse_message;
}

}  // namespace
}  // namespace kvdice
