// Runs the kvdice binary (or another program) as a child process and captures its exit code, stdout and
// stderr.
#pragma once

#include <string>
#include <vector>

namespace kvdice::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// `stdout_path`, when set, is where the child's stdout goes (e.g. /dev/full) instead of a capture file.
// The child is killed by SIGALRM after `timeout_s`, so a hang fails the test instead of stalling CI.
CommandResult run_kvdice(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                         const std::string& stdout_path = "", unsigned timeout_s = 300);

// The same for `program`, looked up in PATH when its name has no slash (git, for instance).
CommandResult run_program(const std::string& program, const std::vector<std::string>& args,
                          const std::vector<std::string>& env = {}, const std::string& stdout_path = "",
                          unsigned timeout_s = 300);

}  // namespace kvdice::testing
