// Runs an untrusted Python program in a fresh python3 process with its own throwaway directory and
// these layers: its own network namespace (no interfaces), a seccomp filter (libseccomp: no
// sockets, no fork/vfork/clone of processes, no namespace, mount, ptrace or module calls), Landlock
// (writes only beneath its directory; no TCP bind/connect), an unprivileged uid when started as
// root, and rlimits on address space, CPU seconds, file size and open files; a wall-clock limit
// kills its whole process group. Each layer that could not be set up is reported, never hidden.
#pragma once

#include <cstdint>
#include <string>

namespace kvdice::eval {

struct SandboxLimits {
  double wall_seconds = 20.0;
  int cpu_seconds = 20;
  int64_t memory_bytes = int64_t{2} << 30;   // RLIMIT_AS
  int64_t file_bytes = int64_t{16} << 20;    // RLIMIT_FSIZE
  int64_t output_bytes = int64_t{32} << 20;  // stdout + stderr kept; more kills the program
};

enum class SandboxStatus { Exited, Signaled, WallTimeout, OutputLimit };

struct SandboxResult {
  SandboxStatus status = SandboxStatus::Exited;
  int exit_code = -1;  // Exited
  int signal = 0;      // Signaled
  std::string out;
  std::string err;
  double seconds = 0.0;
  std::string layers;  // what was set up, e.g. "netns seccomp landlock=7 uid=65534 rlimits"
};

// `program` is written to solution.py in a fresh directory under the system temp folder, run as
// `python3 -I -B solution.py` with `stdin_data` on its stdin, and the directory is removed after.
// Error only when the sandbox itself cannot be built (no python3, no fork, seccomp refused). The
// child is set up between fork and exec, so call this from a single-threaded process (`eval grade`).
SandboxResult run_python_sandboxed(const std::string& program, const std::string& stdin_data,
                                   const SandboxLimits& limits);

}  // namespace kvdice::eval
