#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace kvdice::formats {
namespace {

constexpr uint32_t kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;             // arrays of arrays of ...; real files use none
constexpr uint64_t kMinTensorInfoBytes = 32;  // name length, n_dims, one dim, type, offset
constexpr uint64_t kMinKvBytes = 13;          // key length, value type, one byte of value
constexpr uint64_t kMaxKeyBytes = 65535;      // the GGUF specification's limit on a metadata key
constexpr uint64_t kMaxTensorNameBytes = 64;  // the GGUF specification's limit on a tensor name

size_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    default:
      return 0;  // string, array
  }
}

bool is_integer_type(GgufType type) {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64:
      return true;
    default:
      return false;
  }
}

template <class T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes one little-endian scalar of an integer type as (is_signed, bits).
std::pair<bool, uint64_t> load_integer(GgufType type, const uint8_t* p) {
  switch (type) {
    case GgufType::U8:
      return {false, p[0]};
    case GgufType::I8:
      return {true, static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(p[0])))};
    case GgufType::U16:
      return {false, load_le<uint16_t>(p)};
    case GgufType::I16:
      return {true, static_cast<uint64_t>(static_cast<int64_t>(load_le<int16_t>(p)))};
    case GgufType::U32:
      return {false, load_le<uint32_t>(p)};
    case GgufType::I32:
      return {true, static_cast<uint64_t>(static_cast<int64_t>(load_le<int32_t>(p)))};
    case GgufType::U64:
      return {false, load_le<uint64_t>(p)};
    case GgufType::I64:
      return {true, load_le<uint64_t>(p)};
    default:
      return {false, 0};
  }
}

std::string_view type_label(GgufType type);

// Bounds-checked little-endian cursor over the file bytes; every read names `where` and what it read.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& where) : bytes_(bytes), where_(where) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  const uint8_t* take(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      fail("{}: truncated GGUF: {} needs {} bytes at offset {}, only {} left", where_, what, n, pos_,
           remaining());
    }
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint32_t u32(std::string_view what) { return load_le<uint32_t>(take(4, what)); }
  uint64_t u64(std::string_view what) { return load_le<uint64_t>(take(8, what)); }
  std::string string(std::string_view what) {
    const uint64_t at = pos_;
    const uint64_t n = u64(what);
    if (n > remaining()) {
      fail("{}: {} is declared a string of {} bytes at offset {}, but only {} bytes remain "
           "(a corrupt length or value type, or a truncated file)",
           where_, what, n, at, remaining());
    }
    const uint8_t* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  // A key or a tensor name: its length is bounded by the format, so a length past the bound means the
  // bytes before it were misread (most often a value whose type byte changed); `context` says which.
  std::string name(std::string_view what, uint64_t max_bytes, const std::string& context) {
    const uint64_t at = pos_;
    const uint64_t n = u64(what);
    if (n > max_bytes) {
      fail("{}: {} at offset {} declares a length of {} bytes, more than the format's {}: {}", where_, what, at,
           n, max_bytes, context);
    }
    return std::string(reinterpret_cast<const char*>(take(n, what)), n);
  }
  // An element count that claims more elements than the remaining bytes could hold is rejected
  // before anything is allocated for it.
  void check_count(uint64_t count, uint64_t min_bytes_each, std::string_view what) {
    if (count > remaining() / min_bytes_each) {
      fail("{}: {} claims {} entries at offset {}, but only {} bytes remain", where_, what, count, pos_,
           remaining());
    }
  }

  GgufType value_type(std::string_view what) {
    const uint32_t t = u32(what);
    if (t > static_cast<uint32_t>(GgufType::F64)) {
      fail("{}: {} has unknown metadata value type {} (expected 0..12)", where_, what, t);
    }
    return static_cast<GgufType>(t);
  }

  GgufValue value(GgufType type, const std::string& key, int depth) {
    GgufValue v;
    v.type = type;
    switch (type) {
      case GgufType::U8:
      case GgufType::U16:
      case GgufType::U32:
      case GgufType::U64:
      case GgufType::I8:
      case GgufType::I16:
      case GgufType::I32:
      case GgufType::I64: {
        auto [is_signed, bits] = load_integer(type, take(scalar_size(type), key));
        if (is_signed) {
          v.scalar = static_cast<int64_t>(bits);
        } else {
          v.scalar = bits;
        }
        break;
      }
      case GgufType::F32:
        v.scalar = static_cast<double>(load_le<float>(take(4, key)));
        break;
      case GgufType::F64:
        v.scalar = load_le<double>(take(8, key));
        break;
      case GgufType::Bool: {
        const uint8_t b = *take(1, key);
        if (b > 1) fail("{}: metadata {} is a bool with byte value {} (expected 0 or 1)", where_, key, b);
        v.scalar = b == 1;
        break;
      }
      case GgufType::String: {
        // A huge length here usually means the value type byte is wrong (a u32 read as a string
        // length), so say both possibilities rather than only "truncated".
        const uint64_t at = pos_;
        const uint64_t n = u64(key);
        if (n > remaining()) {
          fail(
              "{}: metadata {} is declared a string of {} bytes at offset {}, but only {} bytes remain "
              "(a corrupt value type or a truncated file)",
              where_, key, n, at, remaining());
        }
        v.scalar = std::string(reinterpret_cast<const char*>(take(n, key)), n);
        break;
      }
      case GgufType::Array: {
        if (depth >= kMaxArrayDepth) {
          fail("{}: metadata {} nests arrays deeper than {}", where_, key, kMaxArrayDepth);
        }
        v.element_type = value_type(key);
        v.count = u64(key);
        if (v.count > remaining()) {
          fail(
              "{}: metadata {} is declared an array of {} {} elements at offset {}, but only {} bytes remain "
              "(a corrupt value type or a truncated file)",
              where_, key, v.count, type_label(v.element_type), pos_ - 8, remaining());
        }
        if (v.element_type == GgufType::String) {
          check_count(v.count, 8, key);
          v.strings.reserve(v.count);
          for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(string(key));
        } else if (v.element_type == GgufType::Array) {
          check_count(v.count, 12, key);
          v.items.reserve(v.count);
          for (uint64_t i = 0; i < v.count; ++i) v.items.push_back(value(GgufType::Array, key, depth + 1));
        } else {
          const size_t each = scalar_size(v.element_type);
          check_count(v.count, each, key);
          v.raw = {take(v.count * each, key), v.count * each};
          if (v.element_type == GgufType::Bool) {
            for (uint8_t b : v.raw) {
              if (b > 1)
                fail("{}: metadata {} holds a bool with byte value {} (expected 0 or 1)", where_, key, b);
            }
          }
        }
        break;
      }
    }
    return v;
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& where_;
  uint64_t pos_ = 0;
};

std::string_view type_label(GgufType type) {
  switch (type) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::Bool:
      return "bool";
    case GgufType::String:
      return "string";
    case GgufType::Array:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "unknown";
}

// Signed value of an integer scalar or array element; nullopt when a u64 exceeds int64.
std::optional<int64_t> as_int64(GgufType type, const uint8_t* p) {
  auto [is_signed, bits] = load_integer(type, p);
  if (!is_signed && bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(bits);
}

}  // namespace

std::string_view gguf_type_name(GgufType type) { return type_label(type); }

bool GgufValue::is_integer() const { return is_integer_type(type); }

std::string GgufValue::type_string() const {
  if (type != GgufType::Array) return std::string(type_label(type));
  if (element_type == GgufType::Array && !items.empty())
    return fmt::format("array[{}]", items[0].type_string());
  return fmt::format("array[{}]", type_label(element_type));
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
  auto file = std::make_shared<const MappedFile>(path);
  GgufFile gguf = parse(file->bytes(), path.string());
  gguf.file_ = std::move(file);
  return gguf;
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, std::string where) {
  GgufFile g;
  g.where_ = std::move(where);
  const std::string& w = g.where_;
  Reader r(bytes, w);

  const uint8_t* magic = r.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    fail("{}: not a GGUF file: magic bytes {:02x} {:02x} {:02x} {:02x} (expected \"GGUF\")", w, magic[0],
         magic[1], magic[2], magic[3]);
  }
  g.version_ = r.u32("version");
  if (g.version_ == 0x02000000u || g.version_ == 0x03000000u) {
    fail("{}: big-endian GGUF is not supported (expected a little-endian file)", w);
  }
  if (g.version_ != 2 && g.version_ != 3)
    fail("{}: GGUF version {} is not supported (expected 2 or 3)", w, g.version_);

  const uint64_t n_tensors = r.u64("tensor count");
  const uint64_t n_kv = r.u64("metadata count");
  r.check_count(n_kv, kMinKvBytes, "metadata count");

  g.metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.name(
        "metadata key", kMaxKeyBytes,
        g.metadata_.empty()
            ? std::string("the header before it is corrupt")
            : fmt::format("the value before it (key {}, type {}) is corrupt, or its type was changed",
                          quote_for_message(g.metadata_.back().first), g.metadata_.back().second.type_string()));
    const GgufType type = r.value_type(key);
    GgufValue value = r.value(type, key, 0);
    if (g.metadata_index_.count(key) != 0) fail("{}: duplicate metadata key {}", w, key);
    g.metadata_index_.emplace(key, g.metadata_.size());
    g.metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* align = g.find("general.alignment")) {
    if (align->type != GgufType::U32) {
      fail("{}: metadata general.alignment is {}, expected u32", w, align->type_string());
    }
    const uint64_t a = std::get<uint64_t>(align->scalar);
    if (a == 0 || (a & (a - 1)) != 0) fail("{}: general.alignment is {} (expected a power of two)", w, a);
    g.alignment_ = a;
  }

  r.check_count(n_tensors, kMinTensorInfoBytes, "tensor count");
  g.tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = r.name("tensor name", kMaxTensorNameBytes,
                    g.tensors_.empty() ? std::string("the metadata before it is corrupt, or a value's type was changed")
                                       : fmt::format("the tensor before it ({}) is corrupt", g.tensors_.back().name));
    const uint32_t n_dims = r.u32(t.name);
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail("{}: tensor {} has {} dimensions (expected 1 to {})", w, t.name, n_dims, kMaxDims);
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = r.u64(t.name);
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("{}: tensor {} dimension {} is {} (too large)", w, t.name, d, dim);
      }
      const auto sdim = static_cast<int64_t>(dim);
      if (sdim != 0 && t.n_elements > std::numeric_limits<int64_t>::max() / sdim) {
        fail("{}: tensor {} element count overflows", w, t.name);
      }
      t.n_elements *= sdim;
      t.dims.push_back(sdim);
    }
    const uint32_t type_id = r.u32(t.name);
    const auto traits = ggml_type_traits(type_id);
    if (!traits) fail("{}: tensor {} has unknown ggml type {}", w, t.name, type_id);
    t.type = static_cast<GgmlType>(type_id);
    if (t.dims[0] % traits->block_size != 0) {
      fail("{}: tensor {} ({}) has a row of {} elements, not a multiple of the block size {}", w, t.name,
           traits->name, t.dims[0], traits->block_size);
    }
    const auto n_blocks = static_cast<uint64_t>(t.n_elements / traits->block_size);
    const auto type_size = static_cast<uint64_t>(traits->type_size);
    if (n_blocks > std::numeric_limits<uint64_t>::max() / type_size) {
      fail("{}: tensor {} byte size overflows", w, t.name);
    }
    t.n_bytes = n_blocks * type_size;
    t.offset = r.u64(t.name);
    if (g.tensor_index_.count(t.name) != 0) fail("{}: duplicate tensor name {}", w, t.name);
    g.tensor_index_.emplace(t.name, g.tensors_.size());
    g.tensors_.push_back(std::move(t));
  }

  const uint64_t end_of_infos = r.pos();
  const uint64_t pad = (g.alignment_ - end_of_infos % g.alignment_) % g.alignment_;
  g.data_offset_ = end_of_infos + pad;  // cannot overflow: end_of_infos <= file size, pad < alignment
  const uint64_t file_size = bytes.size();
  for (GgufTensor& t : g.tensors_) {
    if (t.offset % g.alignment_ != 0) {
      fail("{}: tensor {} offset {} is not a multiple of the alignment {}", w, t.name, t.offset,
           g.alignment_);
    }
    const uint64_t avail = file_size >= g.data_offset_ ? file_size - g.data_offset_ : 0;
    if (t.offset > avail || t.n_bytes > avail - t.offset) {
      fail("{}: tensor {} ({}, {} bytes at data offset {}) extends past the end of the file ({} data bytes)",
           w, t.name, ggml_type_name(t.type), t.n_bytes, t.offset, avail);
    }
    t.data = bytes.subspan(g.data_offset_ + t.offset, t.n_bytes);
  }
  // Two tensors over the same bytes are a corrupt (or crafted) file: writing one would change the other,
  // and the safetensors loader refuses the same layout.
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : g.tensors_) {
    if (t.n_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor* prev = by_offset[i - 1];
    const GgufTensor* next = by_offset[i];
    if (next->offset < prev->offset + prev->n_bytes) {
      fail("{}: tensors {} [{}, {}) and {} [{}, {}) share bytes of the data section", w, prev->name,
           prev->offset, prev->offset + prev->n_bytes, next->name, next->offset,
           next->offset + next->n_bytes);
    }
  }
  return g;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::value(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail("{}: metadata key {} is missing", where_, key);
  return *v;
}

void GgufFile::type_error(std::string_view key, const GgufValue& value, std::string_view expected) const {
  fail("{}: metadata {} is {}, expected {}", where_, key, value.type_string(), expected);
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = value(key);
  if (!v.is_integer()) type_error(key, v, "an integer");
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("{}: metadata {} is {} (too large)", where_, key, *u);
    }
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(v.scalar);
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = value(key);
  if (!v.is_float()) type_error(key, v, "f32 or f64");
  return std::get<double>(v.scalar);
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Bool) type_error(key, v, "bool");
  return std::get<bool>(v.scalar);
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::String) type_error(key, v, "string");
  return std::get<std::string>(v.scalar);
}

std::string GgufFile::get_string(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : std::move(fallback);
}

const GgufValue& GgufFile::array_value(std::string_view key, std::string_view expected) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array) type_error(key, v, expected);
  return v;
}

size_t GgufFile::array_size(std::string_view key) const { return array_value(key, "an array").count; }

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = array_value(key, "array[string]");
  if (v.element_type != GgufType::String) type_error(key, v, "array[string]");
  return v.strings;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = array_value(key, "an array of integers");
  if (!is_integer_type(v.element_type)) type_error(key, v, "an array of integers");
  const size_t each = scalar_size(v.element_type);
  std::vector<int64_t> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) {
    auto x = as_int64(v.element_type, v.raw.data() + i * each);
    if (!x) fail("{}: metadata {} element {} does not fit in int64", where_, key, i);
    out[i] = *x;
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = array_value(key, "array[f32] or array[f64]");
  if (v.element_type != GgufType::F32 && v.element_type != GgufType::F64) {
    type_error(key, v, "array[f32] or array[f64]");
  }
  std::vector<double> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) {
    out[i] = v.element_type == GgufType::F32 ? load_le<float>(v.raw.data() + i * 4)
                                             : load_le<double>(v.raw.data() + i * 8);
  }
  return out;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) fail("{}: tensor {} is missing", where_, name);
  return *t;
}

std::vector<float> GgufFile::dequantize(const GgufTensor& tensor) const {
  std::vector<float> out(static_cast<size_t>(tensor.n_elements));
  formats::dequantize(tensor.type, tensor.data, out, fmt::format("{}: tensor {}", where_, tensor.name));
  return out;
}

}  // namespace kvdice::formats
