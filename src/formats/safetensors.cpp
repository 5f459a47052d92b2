#include "formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "formats/gguf_dequant.h"

namespace kvdice::formats {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

// The reference implementation's limit; a larger header is corrupt, not a big model.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

struct DTypeBits {
  std::string_view name;
  int bits;
};
constexpr DTypeBits kDTypes[] = {
    {"BOOL", 8}, {"U8", 8},   {"I8", 8},    {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"I16", 16},
    {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},    {"U32", 32},    {"F32", 32},    {"I64", 64},
    {"U64", 64}, {"F64", 64}, {"C64", 64},  {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

std::string dtype_list() {
  std::string out;
  for (const auto& d : kDTypes) {
    if (!out.empty()) out += ", ";
    out += d.name;
  }
  return out;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(p[i]) << (8 * i);
  return value;
}

uint64_t require_unsigned(const Json& value, const std::string& where, const std::string& tensor,
                          const char* field) {
  if (!value.is_number_unsigned()) {
    fail("{}: tensor '{}': {} must hold non-negative integers, found {}", where, tensor, field, value.dump());
  }
  return value.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const Json& value, uint64_t data_size,
                             const std::string& where) {
  if (!value.is_object())
    fail("{}: tensor '{}': expected an object with dtype, shape, data_offsets", where, name);
  SafetensorsEntry entry;
  entry.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string())
    fail("{}: tensor '{}': missing string field 'dtype'", where, name);
  entry.dtype = dtype->get<std::string>();
  int bits = safetensors_dtype_bits(entry.dtype);
  if (bits == 0) {
    fail("{}: tensor '{}': unknown dtype '{}' (expected one of {})", where, name, entry.dtype, dtype_list());
  }

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array())
    fail("{}: tensor '{}': missing array field 'shape'", where, name);
  uint64_t numel = 1;
  bool overflow = false;
  bool has_zero_dim = false;
  for (const auto& dim_json : *shape) {
    uint64_t dim = require_unsigned(dim_json, where, name, "shape");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
    has_zero_dim = has_zero_dim || dim == 0;
    entry.shape.push_back(static_cast<int64_t>(dim));
    overflow = __builtin_mul_overflow(numel, dim, &numel) || overflow;
  }
  if (has_zero_dim) {  // an empty tensor, whatever the other dimensions say
    overflow = false;
    numel = 0;
  }
  uint64_t total_bits = 0;
  if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &total_bits)) {
    fail("{}: tensor '{}': shape {} is too large", where, name, shape->dump());
  }
  if (total_bits % 8 != 0) {
    fail("{}: tensor '{}': shape {} of {} does not fill whole bytes", where, name, shape->dump(),
         entry.dtype);
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2) {
    fail("{}: tensor '{}': data_offsets must be an array [begin, end]", where, name);
  }
  entry.begin = require_unsigned((*offsets)[0], where, name, "data_offsets");
  entry.end = require_unsigned((*offsets)[1], where, name, "data_offsets");
  if (entry.begin > entry.end) {
    fail("{}: tensor '{}': data_offsets [{}, {}] has begin after end", where, name, entry.begin, entry.end);
  }
  if (entry.end > data_size) {
    fail("{}: tensor '{}': data_offsets [{}, {}] run past the data buffer of {} bytes (truncated file?)",
         where, name, entry.begin, entry.end, data_size);
  }
  if (entry.end - entry.begin != total_bits / 8) {
    fail("{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", where, name,
         shape->dump(), entry.dtype, total_bits / 8, entry.begin, entry.end, entry.end - entry.begin);
  }
  return entry;
}

void check_no_overlap(const std::vector<SafetensorsEntry>& tensors, const std::string& where) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& t : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);  // empty tensors occupy no bytes
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* next = by_offset[i];
    if (next->begin < prev->end) {
      fail("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", where, prev->name, prev->begin, prev->end,
           next->name, next->begin, next->end);
    }
  }
}

template <class Convert>
void convert_elements(const uint8_t* src, float* dst, int64_t count, Convert convert) {
#pragma omp parallel for if (count > (int64_t{1} << 20))
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    dst[i] = convert(bits);
  }
}

}  // namespace

int safetensors_dtype_bits(std::string_view dtype) {
  for (const auto& d : kDTypes) {
    if (d.name == dtype) return d.bits;
  }
  return 0;
}

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file_bytes, const std::string& where) {
  if (file_bytes.size() < 8) {
    fail("{}: truncated safetensors file: {} bytes, expected at least 8 for the header length", where,
         file_bytes.size());
  }
  uint64_t header_length = read_u64_le(file_bytes.data());
  uint64_t after_length = file_bytes.size() - 8;
  if (header_length > after_length) {
    fail("{}: header length {} exceeds the {} bytes that follow it (truncated or not a safetensors file)",
         where, header_length, after_length);
  }
  if (header_length > kMaxHeaderBytes) {
    fail("{}: header length {} exceeds the {} byte limit", where, header_length, kMaxHeaderBytes);
  }

  SafetensorsHeader header;
  header.data_start = 8 + header_length;
  header.data_size = after_length - header_length;

  const uint8_t* text = file_bytes.data() + 8;
  // Duplicate keys are refused: nlohmann keeps the last, the reference (serde) another reading.
  const Json json = parse_json_text(
      std::string_view(reinterpret_cast<const char*>(text), static_cast<size_t>(header_length)),
      where + ": header");
  if (!json.is_object()) fail("{}: header must be a JSON object, found {}", where, json.type_name());

  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("{}: __metadata__ must be an object of strings", where);
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) fail("{}: __metadata__ field '{}' must be a string", where, meta_key);
        header.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parse_entry(key, value, header.data_size, where));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  check_no_overlap(header.tensors, where);
  return header;
}

SafetensorsSource::SafetensorsSource(const fs::path& path) : path_(path) {
  if (fs::is_regular_file(path)) {
    add_all_tensors(add_shard(path));
    return;
  }
  if (!fs::is_directory(path)) fail("{}: no such checkpoint directory or .safetensors file", path.string());
  auto single = path / "model.safetensors";
  auto index = path / "model.safetensors.index.json";
  if (fs::exists(single)) {
    add_all_tensors(add_shard(single));
  } else if (fs::exists(index)) {
    open_index(index);
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json in the checkpoint directory",
         path.string());
  }
}

const SafetensorsSource::Shard& SafetensorsSource::add_shard(const fs::path& file) {
  auto shard = std::make_unique<Shard>(Shard{MappedFile(file), {}});
  shard->header = parse_safetensors_header(shard->file.bytes(), file.string());
  shards_->push_back(std::move(shard));
  return *shards_->back();
}

void SafetensorsSource::add_all_tensors(const Shard& shard) {
  for (const auto& entry : shard.header.tensors) tensors_[entry.name] = {&shard, &entry};
}

void SafetensorsSource::open_index(const fs::path& index_path) {
  std::string where = index_path.string();
  Json index = read_json_file(index_path);
  auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || weight_map == index.end() || !weight_map->is_object() || weight_map->empty()) {
    fail("{}: expected a non-empty object 'weight_map' of tensor name -> shard file", where);
  }
  std::map<std::string, const Shard*> by_file;
  for (const auto& [name, file_json] : weight_map->items()) {
    if (!file_json.is_string()) fail("{}: weight_map entry '{}' must be a shard file name", where, name);
    std::string file = file_json.get<std::string>();
    // Shards sit beside the index; a path that leaves the directory is a corrupt or hostile index.
    if (file.empty() || fs::path(file).filename() != file || file == "." || file == "..") {
      fail("{}: weight_map entry '{}' names shard '{}', expected a plain file name", where, name, file);
    }
    auto it = by_file.find(file);
    if (it == by_file.end()) {
      fs::path shard_path = path_ / file;
      if (!fs::exists(shard_path)) {
        fail("{}: shard {} (listed for tensor '{}') is missing", where, shard_path.string(), name);
      }
      it = by_file.emplace(file, &add_shard(shard_path)).first;
    }
    const SafetensorsEntry* entry = it->second->header.find(name);
    if (entry == nullptr) {
      fail("{}: tensor '{}' is in the weight_map but not in shard {}", where, name,
           it->second->file.path().string());
    }
    tensors_[name] = {it->second, entry};
  }
}

std::string SafetensorsSource::describe() const { return path_.string(); }

std::vector<TensorInfo> SafetensorsSource::list() const {
  std::vector<TensorInfo> out;
  out.reserve(tensors_.size());
  for (const auto& [name, location] : tensors_)
    out.push_back({name, location.entry->dtype, location.entry->shape});
  return out;
}

std::optional<TensorInfo> SafetensorsSource::find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return TensorInfo{name, it->second.entry->dtype, it->second.entry->shape};
}

void SafetensorsSource::check_loadable(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("{}: no tensor named '{}'", describe(), name);
  const std::string& dtype = it->second.entry->dtype;
  if (dtype != "F32" && dtype != "F16" && dtype != "BF16") {
    fail("{}: tensor '{}' has unsupported dtype {} (supported: F32, F16, BF16)",
         it->second.shard->file.path().string(), name, dtype);
  }
}

Tensor SafetensorsSource::load_f32(const std::string& name) const {
  check_loadable(name);
  auto it = tensors_.find(name);
  const Shard& shard = *it->second.shard;
  const SafetensorsEntry& entry = *it->second.entry;
  const std::string& dtype = entry.dtype;
  Tensor tensor;
  tensor.shape = entry.shape;
  tensor.data.resize(static_cast<size_t>(tensor.numel()));
  const uint8_t* src = shard.file.data() + shard.header.data_start + entry.begin;
  int64_t count = tensor.numel();
  if (count == 0) return tensor;
  if (dtype == "F32") {
    std::memcpy(tensor.data.data(), src, static_cast<size_t>(count) * 4);
  } else if (dtype == "BF16") {
    convert_elements(src, tensor.data.data(), count, bf16_to_f32);
  } else {
    convert_elements(src, tensor.data.data(), count, f16_to_f32);
  }
  return tensor;
}

std::optional<StoredBlocks> SafetensorsSource::stored_blocks(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  const SafetensorsEntry& entry = *it->second.entry;
  if (entry.shape.size() != 2 || (entry.dtype != "BF16" && entry.dtype != "F16")) return std::nullopt;
  const uint32_t type = static_cast<uint32_t>(entry.dtype == "BF16" ? GgmlType::BF16 : GgmlType::F16);
  const Shard& shard = *it->second.shard;
  return StoredBlocks{type, shard.file.data() + shard.header.data_start + entry.begin, entry.shape[0], entry.shape[1],
                      entry.shape[1] * 2};
}

std::unique_ptr<TensorSource> open_safetensors_dir(const fs::path& dir) {
  return std::make_unique<SafetensorsSource>(dir);
}

}  // namespace kvdice::formats
