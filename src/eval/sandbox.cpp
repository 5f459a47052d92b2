#include "eval/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/landlock.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace kvdice::eval {
namespace {

constexpr uid_t kNobody = 65534;

// Debian 12's kernel headers stop at Landlock ABI 2; the kernel may speak a newer one. These are
// the stable uapi values (linux/landlock.h): TRUNCATE since ABI 3, TCP rights since ABI 4.
constexpr uint64_t kLandlockTruncate = 1ull << 14;
constexpr uint64_t kLandlockNetBindTcp = 1ull << 0;
constexpr uint64_t kLandlockNetConnectTcp = 1ull << 1;
struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
};

std::string find_python3() {
  for (const char* candidate : {"/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"})
    if (access(candidate, X_OK) == 0) return candidate;
  fail("the code grader needs python3 (not found in /usr/bin, /usr/local/bin or /bin)");
}

// Child-side functions: no allocation-heavy work, report through `report_fd`, exit 126 on failure.
void report(int fd, const char* text) { [[maybe_unused]] auto n = write(fd, text, strlen(text)); }

[[noreturn]] void child_fail(int fd, const char* what) {
  char buffer[256];
  snprintf(buffer, sizeof buffer, " SETUP-FAILED %s: %s", what, strerror(errno));
  report(fd, buffer);
  _exit(126);
}

void set_limit(int resource, rlim_t value, int fd) {
  rlimit limit{value, value};
  if (setrlimit(resource, &limit) != 0) child_fail(fd, "setrlimit");
}

// Writes beneath `dir` only (plus /dev/null); no TCP bind or connect where the ABI has it.
int apply_landlock(const char* dir) {
  const long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) return 0;
  uint64_t write_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                          LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                          LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                          LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                          LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) write_rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) write_rights |= kLandlockTruncate;
  LandlockRulesetAttr attr{write_rights, 0};
  size_t attr_size = sizeof(uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = kLandlockNetBindTcp | kLandlockNetConnectTcp;
    attr_size = sizeof attr;
  }
  const int ruleset = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0));
  if (ruleset < 0) return 0;
  auto allow = [&](const char* path, uint64_t rights) {
    const int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return false;
    landlock_path_beneath_attr beneath{rights, fd};
    const bool ok = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) == 0;
    close(fd);
    return ok;
  };
  const uint64_t file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? kLandlockTruncate : 0);
  if (!allow(dir, write_rights) || !allow("/dev/null", file_rights)) return 0;
  if (syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) return 0;
  close(ruleset);
  return static_cast<int>(abi);
}

bool apply_seccomp() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return false;
  const int eperm = SCMP_ACT_ERRNO(EPERM);
  bool ok = true;
  auto deny = [&](int syscall_nr) { ok = ok && seccomp_rule_add(ctx, eperm, syscall_nr, 0) == 0; };
  // Networking: no socket of any family, so nothing can connect even outside the namespace.
  deny(SCMP_SYS(socket));
  deny(SCMP_SYS(socketpair));
  // Processes: threads are fine (clone with CLONE_THREAD), new processes are not; clone3 answers
  // ENOSYS so glibc falls back to clone, whose flags a filter can read.
  deny(SCMP_SYS(fork));
  deny(SCMP_SYS(vfork));
  ok = ok &&
       seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)) == 0;
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) == 0;
  // Escapes and host changes.
  for (int nr : {SCMP_SYS(ptrace),
                 SCMP_SYS(process_vm_readv),
                 SCMP_SYS(process_vm_writev),
                 SCMP_SYS(unshare),
                 SCMP_SYS(setns),
                 SCMP_SYS(mount),
                 SCMP_SYS(umount2),
                 SCMP_SYS(pivot_root),
                 SCMP_SYS(chroot),
                 SCMP_SYS(init_module),
                 SCMP_SYS(finit_module),
                 SCMP_SYS(delete_module),
                 SCMP_SYS(kexec_load),
                 SCMP_SYS(reboot),
                 SCMP_SYS(bpf),
                 SCMP_SYS(perf_event_open),
                 SCMP_SYS(keyctl),
                 SCMP_SYS(add_key),
                 SCMP_SYS(request_key),
                 SCMP_SYS(io_uring_setup),
                 SCMP_SYS(userfaultfd),
                 SCMP_SYS(kill)})
    deny(nr);
  ok = ok && seccomp_load(ctx) == 0;
  seccomp_release(ctx);
  return ok;
}

[[noreturn]] void run_child(const std::string& python, const std::filesystem::path& dir,
                            const SandboxLimits& limits, int in_fd, int out_fd, int err_fd, int report_fd) {
  setpgid(0, 0);
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) child_fail(report_fd, "dup2");
  // Keep 0-2 and the report pipe (close-on-exec) only.
  for (int fd = 3; fd < 1024; ++fd)
    if (fd != report_fd) close(fd);
  if (unshare(CLONE_NEWNET) == 0 || unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) report(report_fd, " netns");
  if (geteuid() == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0)
      child_fail(report_fd, "setuid");
    report(report_fd, " uid=65534");
  }
  if (chdir(dir.c_str()) != 0) child_fail(report_fd, "chdir");
  set_limit(RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_seconds), report_fd);
  set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(limits.file_bytes), report_fd);
  set_limit(RLIMIT_NOFILE, 64, report_fd);
  set_limit(RLIMIT_CORE, 0, report_fd);
  report(report_fd, " rlimits");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(report_fd, "no_new_privs");
  if (const int abi = apply_landlock(dir.c_str()); abi > 0) {
    char buffer[32];
    snprintf(buffer, sizeof buffer, " landlock=%d", abi);
    report(report_fd, buffer);
  }
  if (!apply_seccomp()) child_fail(report_fd, "seccomp");
  report(report_fd, " seccomp");
  // The address-space limit last, with nothing left to allocate before execve: the child starts as a
  // copy of the grader, whose address space can be far above the program's limit (a process that has
  // initialised CUDA reserves tens of GiB), and building the seccomp filter allocates.
  set_limit(RLIMIT_AS, static_cast<rlim_t>(limits.memory_bytes), report_fd);
  const char* argv[] = {"python3", "-I", "-B", "solution.py", nullptr};
  const char* envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "PYTHONHASHSEED=0", "HOME=/nonexistent",
                        nullptr};
  execve(python.c_str(), const_cast<char* const*>(argv), const_cast<char* const*>(envp));
  child_fail(report_fd, "execve python3");
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

SandboxResult run_python_sandboxed(const std::string& program, const std::string& stdin_data,
                                   const SandboxLimits& limits) {
  static const std::string python = find_python3();
  std::string dir_template = (std::filesystem::temp_directory_path() / "kvdice-sandbox-XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr)
    fail("code grader: cannot create a sandbox directory: {}", strerror(errno));
  const std::filesystem::path dir = dir_template;
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  {
    std::ofstream file(dir / "solution.py", std::ios::binary);
    file << program;
    file.close();  // checked after close: a full disk shows only when the buffer is written
    if (!file) fail("code grader: cannot write {}", (dir / "solution.py").string());
  }
  if (geteuid() == 0 && (chown(dir.c_str(), kNobody, kNobody) != 0 ||
                         chown((dir / "solution.py").c_str(), kNobody, kNobody) != 0))
    fail("code grader: cannot hand {} to uid {}: {}", dir.string(), kNobody, strerror(errno));

  int in_pipe[2], out_pipe[2], err_pipe[2], report_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      pipe2(report_pipe, O_CLOEXEC) != 0)
    fail("code grader: pipe: {}", strerror(errno));
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) fail("code grader: fork: {}", strerror(errno));
  if (pid == 0) run_child(python, dir, limits, in_pipe[0], out_pipe[1], err_pipe[1], report_pipe[1]);
  setpgid(pid, pid);  // also from here, so the kill below finds the group whichever runs first
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(report_pipe[1]);
  set_nonblocking(in_pipe[1]);
  set_nonblocking(out_pipe[0]);
  set_nonblocking(err_pipe[0]);
  // A program may exit without reading its stdin: block SIGPIPE on this thread while feeding it
  // (write then fails with EPIPE) instead of changing the process's signal disposition.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  struct RestoreMask {
    sigset_t pipe_set, old_set;
    ~RestoreMask() {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
      }
      pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
    }
  } restore_mask{pipe_set, old_set};

  SandboxResult result;
  std::string layers;
  size_t written = 0;
  int in_fd = in_pipe[1];
  if (stdin_data.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  bool out_open = true, err_open = true, report_open = true;
  bool killed_for_time = false, killed_for_output = false;
  const auto deadline = start + std::chrono::duration<double>(limits.wall_seconds);
  char buffer[65536];
  while (out_open || err_open || report_open) {
    pollfd fds[4];
    int n = 0;
    if (out_open) fds[n++] = {out_pipe[0], POLLIN, 0};
    if (err_open) fds[n++] = {err_pipe[0], POLLIN, 0};
    if (report_open) fds[n++] = {report_pipe[0], POLLIN, 0};
    if (in_fd >= 0) fds[n++] = {in_fd, POLLOUT, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      killed_for_time = true;
      break;
    }
    if (poll(fds, n, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = fds[i].fd;
      if (fd == in_fd) {
        const ssize_t k = write(fd, stdin_data.data() + written, stdin_data.size() - written);
        if (k > 0) written += static_cast<size_t>(k);
        if (k < 0 && errno != EAGAIN) written = stdin_data.size();
        if (written == stdin_data.size()) {
          close(in_fd);
          in_fd = -1;
        }
        continue;
      }
      const ssize_t k = read(fd, buffer, sizeof buffer);
      if (k <= 0) {
        if (k < 0 && errno == EAGAIN) continue;
        (fd == out_pipe[0] ? out_open : fd == err_pipe[0] ? err_open : report_open) = false;
        continue;
      }
      std::string& sink = fd == out_pipe[0] ? result.out : fd == err_pipe[0] ? result.err : layers;
      sink.append(buffer, static_cast<size_t>(k));
    }
    if (static_cast<int64_t>(result.out.size() + result.err.size()) > limits.output_bytes) {
      killed_for_output = true;
      break;
    }
  }
  if (in_fd >= 0) close(in_fd);
  // Python closes its stdout while finalising, before it exits: wait for the exit (up to the
  // deadline) rather than killing a program that is about to succeed.
  int status = 0;
  bool reaped = false;
  while (!killed_for_time && !killed_for_output) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      killed_for_time = true;
      break;
    }
    usleep(1000);
  }
  kill(-pid, SIGKILL);  // the group: nothing it started outlives it
  if (!reaped) waitpid(pid, &status, 0);
  close(out_pipe[0]);
  close(err_pipe[0]);
  close(report_pipe[0]);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.layers = layers.empty() ? "" : layers.substr(1);
  if (const auto at = result.layers.find("SETUP-FAILED"); at != std::string::npos)
    fail("code grader: the sandbox could not be set up ({})", result.layers.substr(at + 13));
  if (killed_for_time) {
    result.status = SandboxStatus::WallTimeout;
  } else if (killed_for_output) {
    result.status = SandboxStatus::OutputLimit;
  } else if (WIFSIGNALED(status)) {
    result.status = SandboxStatus::Signaled;
    result.signal = WTERMSIG(status);
  } else {
    result.status = SandboxStatus::Exited;
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

}  // namespace kvdice::eval
