#include "eval/hashing.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::eval {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      fail("sha256: OpenSSL init failed");
  }
  void update(std::string_view bytes) {
    if (EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) != 1) fail("sha256: OpenSSL update failed");
  }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned int size = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), digest.data(), &size) != 1) fail("sha256: OpenSSL final failed");
    std::string out;
    for (unsigned int i = 0; i < size; ++i) out += fmt::format("{:02x}", digest[i]);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// Feeds `length` bytes at `offset` of an open file.
void hash_range(Sha256& h, std::ifstream& in, uint64_t offset, uint64_t length,
                const std::filesystem::path& p) {
  std::vector<char> buffer(1 << 20);
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  while (length > 0) {
    const auto n = static_cast<std::streamsize>(std::min<uint64_t>(length, buffer.size()));
    in.read(buffer.data(), n);
    if (in.gcount() != n) fail("cannot read {} while hashing it", p.string());
    h.update(std::string_view(buffer.data(), static_cast<size_t>(n)));
    length -= static_cast<uint64_t>(n);
  }
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

std::string sha256_of_file(const std::filesystem::path& path) {
  ::close(open_regular_file(path));  // a device or FIFO is refused by name, never read for ever
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  Sha256 h;
  hash_range(h, in, 0, std::filesystem::file_size(path), path);
  return h.hex();
}

std::string model_fingerprint(const std::filesystem::path& model_path) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(model_path)) {
    for (const auto& entry : std::filesystem::directory_iterator(model_path)) {
      const auto ext = entry.path().extension().string();
      if (entry.is_regular_file() && (ext == ".json" || ext == ".safetensors" || ext == ".gguf"))
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(model_path);
  }
  if (files.empty())
    fail("model {} holds no .json, .safetensors or .gguf files to fingerprint", model_path.string());
  constexpr uint64_t kEdge = 4u << 20;
  Sha256 h;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("cannot read {}", file.string());
    const uint64_t size = std::filesystem::file_size(file);
    h.update(fmt::format("{}\n{}\n", file.filename().string(), size));
    if (size <= 2 * kEdge) {
      hash_range(h, in, 0, size, file);
    } else {
      hash_range(h, in, 0, kEdge, file);
      hash_range(h, in, size - kEdge, kEdge, file);
    }
  }
  return h.hex();
}

std::string tokenizer_fingerprint(const tokenizer::Tokenizer& tokenizer) {
  Sha256 h;
  for (int id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string bytes = tokenizer.token_bytes(id);
    h.update(fmt::format("{}:{}:", bytes.size(), tokenizer.is_special(id) ? 1 : 0));
    h.update(bytes);
  }
  h.update(fmt::format("bos={} add_bos={}\n", tokenizer.bos_id().value_or(-1), tokenizer.add_bos()));
  h.update(tokenizer.chat_template_source());
  return h.hex();
}

}  // namespace kvdice::eval
