// Checked file input and output. Reads refuse anything that is not a regular file (a FIFO would block
// for ever, a device never ends) and are bounded; writes check every write and close and go through a
// temporary name renamed on commit, so a reader never sees half a file and a full disk is an error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace kvdice {

// Opens `path` for reading, refusing (by name, without blocking) directories, FIFOs, sockets and
// devices. Returns the file descriptor; the caller closes it.
int open_regular_file(const std::filesystem::path& path);

// The whole content of a regular file of at most `max_bytes` bytes; Error naming the path otherwise.
std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes);

// Text named by the user on the command line (a prompt file): a regular file, or a pipe or terminal the
// user set up (`--prompt-file <(cmd)`); at most `max_bytes` bytes either way.
std::string read_user_text_file(const std::filesystem::path& path, uint64_t max_bytes);

// Writes to `path` atomically: bytes go to a temporary file in the same directory, which commit() flushes,
// closes and renames over `path`. A target that exists and is not a regular file (/dev/stdout, a FIFO,
// /dev/full) is written in place, since it cannot be replaced. Destroying an uncommitted AtomicFile
// removes the temporary. Every failure is an Error naming the path and the system's reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view bytes);
  void commit();
  // write(bytes), then commit(): a file opened before the work that produces its bytes.
  void commit(std::string_view bytes);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_;  // empty when writing in place
  int fd_ = -1;
};

// Writes `text` to `path` through an AtomicFile.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

// Flushes stdout and fails (Error) if this or any earlier write to it was lost (stdout is /dev/full).
// Called after streaming each piece, so a full disk stops a generation at once, and before exit.
void flush_stdout();

}  // namespace kvdice
