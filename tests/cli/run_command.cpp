#include "cli/run_command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvdice::testing {
namespace {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

CommandResult run_kvdice(const std::vector<std::string>& args, const std::vector<std::string>& env,
                         const std::string& stdout_path, unsigned timeout_s) {
  return run_program(KVDICE_BINARY, args, env, stdout_path, timeout_s);
}

CommandResult run_program(const std::string& program, const std::vector<std::string>& args,
                          const std::vector<std::string>& env, const std::string& stdout_path,
                          unsigned timeout_s) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvdice_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto out_path = dir / "out", err_path = dir / "err";
  pid_t pid = ::fork();
  if (pid == 0) {
    int out_fd = ::open(stdout_path.empty() ? out_path.c_str() : stdout_path.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::alarm(timeout_s);
    int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::dup2(null_fd, 0);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    std::string binary = program;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(binary.c_str(), argv.data());
    std::_Exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

}  // namespace kvdice::testing
