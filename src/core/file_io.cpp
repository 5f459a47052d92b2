#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace kvdice {
namespace fs = std::filesystem;
namespace {

std::string_view file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// Reads until end of file or `max_bytes` + 1 bytes, whichever comes first.
std::string read_fd(int fd, const fs::path& path, uint64_t max_bytes) {
  std::string out;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail("cannot read {}: {}", path.string(), std::strerror(err));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      fail("{} is larger than the {} byte limit for this file", path.string(), max_bytes);
    }
  }
  ::close(fd);
  return out;
}

}  // namespace

int open_regular_file(const fs::path& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat can refuse it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path.string(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} is {}, expected a regular file", path.string(), file_kind(st.st_mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot read {}: {}", path.string(), std::strerror(err));
  }
  return fd;
}

std::string read_regular_file(const fs::path& path, uint64_t max_bytes) {
  return read_fd(open_regular_file(path), path, max_bytes);
}

std::string read_user_text_file(const fs::path& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  if (S_ISREG(st.st_mode)) return read_regular_file(path, max_bytes);
  if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
    fail("{} is {}, expected a file, a pipe or a terminal", path.string(), file_kind(st.st_mode));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  return read_fd(fd, path, max_bytes);
}

AtomicFile::AtomicFile(fs::path path) : path_(std::move(path)) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) fail("cannot write {}: it is a directory", path_.string());
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot write {}: {}", path_.string(), std::strerror(errno));
    return;
  }
  // The temporary sits beside the target so that rename() stays on one file system.
  static std::atomic<unsigned> counter{0};
  temp_ = path_;
  temp_ += fmt::format(".tmp-{}-{}", ::getpid(), counter++);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    temp_.clear();
    fail("cannot write {}: {}", path_.string(), std::strerror(err));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(std::string_view bytes) {
  KVDICE_CHECK(fd_ >= 0, "write to {} after commit", path_.string());
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write {}: {}", path_.string(), std::strerror(errno));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void AtomicFile::commit() {
  KVDICE_CHECK(fd_ >= 0, "{} committed twice", path_.string());
  // fsync before rename: after a crash the target is the old file or the whole new one, never a stub.
  if (!temp_.empty() && ::fsync(fd_) != 0) fail("cannot write {}: {}", path_.string(), std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot write {}: {}", path_.string(), std::strerror(errno));
  if (temp_.empty()) return;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    fail("cannot write {}: rename from {} failed: {}", path_.string(), temp_.string(), std::strerror(errno));
  }
  temp_.clear();
}

void AtomicFile::commit(std::string_view bytes) {
  write(bytes);
  commit();
}

void write_file_atomically(const fs::path& path, std::string_view text) {
  AtomicFile(path).commit(text);
}

void flush_stdout() {
  errno = 0;
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (failed) {
    const int err = errno;
    std::clearerr(stdout);
    fail("writing to standard output failed: {}",
         err != 0 ? std::strerror(err) : "an earlier write was lost");
  }
}

}  // namespace kvdice
