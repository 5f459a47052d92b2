// Safetensors checkpoints: a header parser over raw file bytes that checks every length, offset and
// shape before anything is read (the fuzz target's entry point), and a TensorSource over an HF
// checkpoint directory holding model.safetensors or shards listed in model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "formats/tensor_source.h"

namespace kvdice::formats {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "BF16", "F32", ...: always one of the safetensors dtypes
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer, end exclusive
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                      // file offset of the data buffer: 8 + header length
  uint64_t data_size = 0;                       // bytes from data_start to the end of the file
  std::vector<SafetensorsEntry> tensors;        // sorted by name
  std::map<std::string, std::string> metadata;  // "__metadata__", when present

  const SafetensorsEntry* find(std::string_view name) const;
};

// Validates the whole header against the file size; throws Error naming `where` (the file) and the
// offending tensor or field. Never reads outside `file_bytes`, whatever they hold.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file_bytes, const std::string& where);

// Bits per element of a safetensors dtype name, or 0 when the name is not a safetensors dtype.
int safetensors_dtype_bits(std::string_view dtype);

class SafetensorsSource : public TensorSource {
 public:
  // `path` is a checkpoint directory (model.safetensors, else model.safetensors.index.json) or one
  // .safetensors file. Every shard is mapped once and its header validated here.
  explicit SafetensorsSource(const std::filesystem::path& path);

  std::string describe() const override;
  std::vector<TensorInfo> list() const override;
  std::optional<TensorInfo> find(const std::string& name) const override;
  Tensor load_f32(const std::string& name) const override;
  void check_loadable(const std::string& name) const override;
  // A 2-D BF16 or F16 tensor as mapped (ggml type ids BF16 = 30, F16 = 1), nothing converted; the
  // shards stay mapped as long as storage() is held.
  std::optional<StoredBlocks> stored_blocks(const std::string& name) const override;
  std::shared_ptr<const void> storage() const override { return shards_; }

 private:
  struct Shard {
    MappedFile file;
    SafetensorsHeader header;
  };
  struct Location {
    const Shard* shard;
    const SafetensorsEntry* entry;
  };

  const Shard& add_shard(const std::filesystem::path& file);
  void add_all_tensors(const Shard& shard);
  void open_index(const std::filesystem::path& index_path);

  std::filesystem::path path_;
  std::shared_ptr<std::vector<std::unique_ptr<Shard>>> shards_ =
      std::make_shared<std::vector<std::unique_ptr<Shard>>>();
  std::map<std::string, Location, std::less<>> tensors_;
};

std::unique_ptr<TensorSource> open_safetensors_dir(const std::filesystem::path& dir);

}  // namespace kvdice::formats
