// The code grader's sandbox on a committed set of programs: correct, wrong, timing out, crashing,
// forking, writing outside their directory, opening a socket, eating memory; and the grader's
// extraction and float-tolerant comparison, stdin and functional tests.
#include <gtest/gtest.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>

#include "core/json.h"
#include "eval/code_grader.h"
#include "eval/sandbox.h"

namespace kvdice::eval {
namespace {

SandboxResult run(const std::string& program, const std::string& input = "", double wall = 10.0) {
  SandboxLimits limits;
  limits.wall_seconds = wall;
  limits.cpu_seconds = static_cast<int>(wall) + 1;
  return run_python_sandboxed(program, input, limits);
}

TEST(Sandbox, RunsAProgramOnItsInput) {
  const auto r = run("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n", "1 2 3\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "6\n");
  EXPECT_NE(r.layers.find("seccomp"), std::string::npos) << r.layers;
  EXPECT_NE(r.layers.find("rlimits"), std::string::npos) << r.layers;
}

TEST(Sandbox, AProgramThatIgnoresItsInputDoesNotKillTheGrader) {
  // 1 MiB of stdin to a program that exits at once: the write fails with EPIPE, not SIGPIPE. The
  // default disposition is restored first (a parent shell may have left SIGPIPE ignored).
  signal(SIGPIPE, SIG_DFL);
  const auto r = run("print('bye')\n", std::string(1 << 20, 'x'));
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  EXPECT_EQ(r.out, "bye\n");
}

TEST(Sandbox, WallClockLimitKillsAnInfiniteLoop) {
  const auto r = run("while True:\n    pass\n", "", 1.0);
  EXPECT_EQ(r.status, SandboxStatus::WallTimeout);
  EXPECT_LT(r.seconds, 3.0);
}

TEST(Sandbox, CrashIsANonZeroExit) {
  const auto r = run("raise ValueError('boom')\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ValueError: boom"), std::string::npos) << r.err;
}

TEST(Sandbox, CannotFork) {
  const auto r =
      run("import os, subprocess\n"
          "try:\n    pid = os.fork()\n    print('forked' if pid else 'child')\nexcept OSError as e:\n    "
          "print('fork:', e.errno)\n"
          "try:\n    subprocess.run(['true'])\n    print('spawned')\nexcept OSError as e:\n    "
          "print('spawn:', e.errno)\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  EXPECT_EQ(r.out, "fork: 1\nspawn: 1\n") << r.err;  // EPERM
}

TEST(Sandbox, ThreadsStillWork) {
  const auto r =
      run("import threading\nt = threading.Thread(target=lambda: print('thread'))\nt.start()\nt.join()\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  EXPECT_EQ(r.out, "thread\n") << r.err;
}

TEST(Sandbox, CannotOpenASocket) {
  const auto r = run(
      "import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n    print('socket')\n"
      "except OSError as e:\n    print('socket:', e.errno)\n"
      "try:\n    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    print('unix')\nexcept OSError as e:\n"
      "    print('unix:', e.errno)\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  EXPECT_EQ(r.out, "socket: 1\nunix: 1\n") << r.err;
}

TEST(Sandbox, OwnNetworkNamespaceHasNoInterfacesButLoopback) {
  const auto r = run("print(sorted(open('/proc/net/dev').read().split()[20::17]))\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  if (r.layers.find("netns") == std::string::npos) GTEST_SKIP() << "no network namespace here: " << r.layers;
  EXPECT_EQ(r.out, "['lo:']\n") << r.out;
}

TEST(Sandbox, WritesOnlyInsideItsDirectory) {
  const auto outside = std::filesystem::temp_directory_path() / ("kvdice_escape_" + std::to_string(getpid()));
  std::filesystem::remove(outside);
  const auto r =
      run("open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())\n"
          "try:\n    open('" +
          outside.string() +
          "', 'w').write('escaped')\n    print('escaped')\n"
          "except OSError as e:\n    print('outside:', e.errno)\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  if (r.layers.find("landlock") == std::string::npos && r.layers.find("uid=") == std::string::npos)
    GTEST_SKIP() << "neither Landlock nor a uid drop here: " << r.layers;
  EXPECT_TRUE(r.out.starts_with("ok\noutside: ")) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(outside));
}

TEST(Sandbox, MemoryLimit) {
  const auto r = run(
      "try:\n    b = bytearray(8 << 30)\n    print('allocated')\nexcept MemoryError:\n    print('memory')\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  EXPECT_EQ(r.out, "memory\n");
}

// A grader whose address space is already larger than the program's memory limit (a process that has
// initialised CUDA reserves tens of GiB of virtual addresses, and the sandbox's child starts as its
// copy) still sets the sandbox up: the limit is the program's, so the setup's own allocations (the
// seccomp filter is built in the child) come before it. Here every allocation takes fresh address
// space (mmap threshold 0), as one from a full malloc arena does.
TEST(Sandbox, AGraderWithAHugeAddressSpaceStillSetsUpTheSandbox) {
  const size_t reserve = size_t{16} << 30;
  void* reserved = mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(reserved, MAP_FAILED) << "cannot reserve 16 GiB of address space here";
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 0), 1);
  struct Restore {
    void* p;
    size_t n;
    ~Restore() {
      mallopt(M_MMAP_THRESHOLD, 128 * 1024);  // glibc's default
      munmap(p, n);
    }
  } restore{reserved, reserve};
  const auto r = run("print('ran')\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  EXPECT_EQ(r.out, "ran\n");
  EXPECT_NE(r.layers.find("seccomp"), std::string::npos) << r.layers;
  const auto m = run("try:\n    b = bytearray(8 << 30)\n    print('allocated')\nexcept MemoryError:\n    print('memory')\n");
  ASSERT_EQ(m.status, SandboxStatus::Exited) << m.err;
  EXPECT_EQ(m.out, "memory\n") << "the program's own limit still holds";
}

TEST(Sandbox, ItsDirectoryIsThrownAway) {
  const auto r = run("import os\nprint(os.getcwd())\n");
  ASSERT_EQ(r.status, SandboxStatus::Exited) << r.err;
  std::string dir = r.out;
  dir.pop_back();
  EXPECT_TRUE(dir.find("kvdice-sandbox-") != std::string::npos) << dir;
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(CodeGrader, ExtractsTheLastPythonBlock) {
  EXPECT_EQ(last_python_block("a\n```python\nx = 1\n```\ntext\n```py\ny = 2\n```\n"), "y = 2\n");
  EXPECT_EQ(last_python_block("```python\nx = 1\n```\n```text\nnot code\n```\n"), "x = 1\n");
  EXPECT_EQ(last_python_block("```python\ncut off"), "cut off");
  EXPECT_FALSE(last_python_block("no code").has_value());
}

TEST(CodeGrader, OutputComparisonIsLineWiseWithFloatTolerance) {
  EXPECT_TRUE(outputs_match("1 2\n3\n\n", "1 2\n3"));
  EXPECT_TRUE(outputs_match("0.3333333\n", "0.33333333"));
  EXPECT_FALSE(outputs_match("0.3334\n", "0.3333"));
  EXPECT_FALSE(outputs_match("1 2 3\n", "1 2\n"));
  EXPECT_FALSE(outputs_match("yes\n", "Yes\n"));
}

TEST(CodeGrader, StdinAndFunctionalProblems) {
  const Json stdin_problem = {
      {"tests", {{{"input", "2\n"}, {"output", "4\n"}}, {{"input", "3\n"}, {"output", "9\n"}}}}};
  GradeOptions options;
  options.test_timeout_s = 5.0;
  EXPECT_EQ(grade_code("```python\nn = int(input())\nprint(n * n)\n```", stdin_problem, options).score, 1.0);
  const auto wrong = grade_code("```python\nn = int(input())\nprint(n + n)\n```", stdin_problem, options);
  EXPECT_EQ(wrong.score, 0.0);
  EXPECT_NE(wrong.detail.find("test 1: wrong answer"), std::string::npos) << wrong.detail;  // 2 + 2 == 2 * 2
  const auto slow = grade_code("```python\nwhile True: pass\n```", stdin_problem, GradeOptions{5.0, 1.0});
  EXPECT_NE(slow.detail.find("timed out"), std::string::npos) << slow.detail;
  EXPECT_EQ(grade_code("no code at all", stdin_problem, options).detail, "no ```python block");

  const Json functional = {{"fn_name", "twoSum"},
                           {"tests", {{{"input", "[2, 7, 11, 15]\n9"}, {"output", "[0, 1]"}}}}};
  const std::string solution =
      "```python\nclass Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
      "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
      "                return [seen[target - x], i]\n            seen[x] = i\n```";
  EXPECT_EQ(grade_code(solution, functional, options).score, 1.0);
  const Json functional_float = {{"fn_name", "half"},
                                 {"tests", {{{"input", "1"}, {"output", "0.5000000001"}}}}};
  EXPECT_EQ(grade_code("```python\ndef half(x):\n    return x / 2\n```", functional_float, options).score,
            1.0);
}

}  // namespace
}  // namespace kvdice::eval
