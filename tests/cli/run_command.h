// Runs the kvdice binary as a child process and captures its exit code, stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace kvdice::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult run_kvdice(const std::vector<std::string>& args, const std::vector<std::string>& env = {});

}  // namespace kvdice::testing
