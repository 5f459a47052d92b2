#include "policy/triattention_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "formats/safetensors.h"

namespace kvdice::policy {
namespace {

constexpr const char* kFormat = "kvdice-triattention-stats";

struct Named {
  const char* name;
  std::vector<float> TriAttentionStats::*member;
};
constexpr Named kTensors[] = {
    {"freq_scale", &TriAttentionStats::freq_scale},   {"omega", &TriAttentionStats::omega},
    {"q_abs_mean", &TriAttentionStats::q_abs_mean},   {"q_mean_imag", &TriAttentionStats::q_mean_imag},
    {"q_mean_real", &TriAttentionStats::q_mean_real}, {"q_weight_norm", &TriAttentionStats::q_weight_norm},
};

std::vector<int64_t> expected_shape(const TriAttentionStats& s, std::string_view name) {
  if (name == "omega" || name == "freq_scale") return {s.bands()};
  if (name == "q_weight_norm") return {s.n_layers};
  return {s.n_layers, s.n_heads, s.bands()};
}

int metadata_int(const std::map<std::string, std::string>& meta, const std::string& key,
                 const std::string& where) {
  auto it = meta.find(key);
  if (it == meta.end()) fail("{}: TriAttention statistics lack the metadata field '{}'", where, key);
  try {
    size_t used = 0;
    const long value = std::stol(it->second, &used);
    if (used == it->second.size() && value > 0 && value <= (1 << 20)) return static_cast<int>(value);
  } catch (const std::exception&) {
  }
  fail("{}: metadata field {}='{}' is not a positive integer", where, key, it->second);
}

bool close_rel(double a, double b, double tol) {
  return std::abs(a - b) <= tol * std::max(std::abs(a), std::abs(b));
}

}  // namespace

double TriAttentionStats::validity() const {
  double total = 0.0;
  for (int l = 0; l < n_layers; ++l) {
    double layer = 0.0;
    for (int h = 0; h < n_heads; ++h) {
      double best = 0.0;
      for (int f = 0; f < bands(); ++f) {
        const int64_t i = index(l, h, f);
        const double mag = std::hypot(double{q_mean_real[i]}, double{q_mean_imag[i]});
        if (q_abs_mean[i] > 0.0f) best = std::max(best, mag / q_abs_mean[i]);
      }
      layer += best / n_heads;
    }
    total += layer / n_layers;
  }
  return total;
}

TriAttentionStats read_triattention_stats(const std::filesystem::path& path) {
  const std::string where = path.string();
  const MappedFile file(path);
  const formats::SafetensorsHeader header = formats::parse_safetensors_header(file.bytes(), where);
  TriAttentionStats s;
  s.metadata = header.metadata;
  auto format = header.metadata.find("format");
  if (format == header.metadata.end() || format->second != kFormat)
    fail(
        "{}: not a TriAttention statistics file (its safetensors metadata has no format={}); make one with "
        "kvdice calibrate",
        where, kFormat);
  s.n_layers = metadata_int(s.metadata, "n_layers", where);
  s.n_heads = metadata_int(s.metadata, "n_heads", where);
  s.n_kv_heads = metadata_int(s.metadata, "n_kv_heads", where);
  s.head_dim = metadata_int(s.metadata, "head_dim", where);
  if (s.head_dim % 2 != 0 || s.n_heads % s.n_kv_heads != 0)
    fail("{}: head_dim {} must be even and n_heads {} a multiple of n_kv_heads {}", where, s.head_dim,
         s.n_heads, s.n_kv_heads);
  for (const Named& t : kTensors) {
    const formats::SafetensorsEntry* entry = header.find(t.name);
    if (!entry) fail("{}: TriAttention statistics lack the tensor '{}'", where, t.name);
    const std::vector<int64_t> shape = expected_shape(s, t.name);
    if (entry->dtype != "F32" || entry->shape != shape)
      fail("{}: tensor '{}' is {} {}, expected F32 {}", where, t.name, entry->dtype,
           shape_string(entry->shape), shape_string(shape));
    std::vector<float>& out = s.*t.member;
    out.resize((entry->end - entry->begin) / sizeof(float));
    std::memcpy(out.data(), file.data() + header.data_start + entry->begin, entry->end - entry->begin);
    for (float v : out)
      if (!std::isfinite(v)) fail("{}: tensor '{}' holds a non-finite value", where, t.name);
  }
  for (size_t i = 0; i < s.q_abs_mean.size(); ++i)
    if (s.q_abs_mean[i] < 0.0f ||
        std::hypot(s.q_mean_real[i], s.q_mean_imag[i]) > s.q_abs_mean[i] * (1.0f + 1e-4f) + 1e-30f)
      fail("{}: entry {} has |E q| > E|q|: not a mean and a mean magnitude of the same queries", where, i);
  return s;
}

std::string triattention_stats_bytes(const TriAttentionStats& stats) {
  Json header = Json::object();
  Json meta = Json::object();
  for (const auto& [key, value] : stats.metadata) meta[key] = value;
  meta["format"] = kFormat;
  meta["version"] = "1";
  meta["n_layers"] = std::to_string(stats.n_layers);
  meta["n_heads"] = std::to_string(stats.n_heads);
  meta["n_kv_heads"] = std::to_string(stats.n_kv_heads);
  meta["head_dim"] = std::to_string(stats.head_dim);
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const Named& t : kTensors) {
    const std::vector<float>& v = stats.*t.member;
    const std::vector<int64_t> shape = expected_shape(stats, t.name);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    KVDICE_CHECK(static_cast<int64_t>(v.size()) == numel, "{} has {} values, expected {}", t.name, v.size(),
                 numel);
    const uint64_t bytes = v.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);  // little-endian
  out += text;
  for (const Named& t : kTensors) {
    const std::vector<float>& v = stats.*t.member;
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));  // x86/ARM: little-endian
  }
  return out;
}

void write_triattention_stats(const std::filesystem::path& path, const TriAttentionStats& stats) {
  write_file_atomically(path, triattention_stats_bytes(stats));
}

void check_stats_match(const TriAttentionStats& s, const ModelFingerprint& c, const std::string& path) {
  const std::string made_for = s.metadata.count("model") ? s.metadata.at("model") : std::string("?");
  if (s.n_layers != c.n_layers || s.n_heads != c.n_heads || s.n_kv_heads != c.n_kv_heads ||
      s.head_dim != c.head_dim)
    fail(
        "TriAttention statistics {} were made for another model ({}: {} layers, {}/{} heads of dim {}); this "
        "model has {} layers, {}/{} heads of dim {}. Run kvdice calibrate for it",
        path, made_for, s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, c.n_layers, c.n_heads, c.n_kv_heads,
        c.head_dim);
  const std::vector<float>& inv_freq = c.rope_inv_freq;
  if (static_cast<int>(inv_freq.size()) != s.bands())
    fail("TriAttention needs RoPE over the whole head ({} bands), this model rotates {} (partial rotary)",
         s.bands(), inv_freq.size());
  for (int f = 0; f < s.bands(); ++f)
    if (!close_rel(inv_freq[f], s.omega[f], 1e-5))
      fail(
          "TriAttention statistics {} were made for another model ({}): RoPE frequency of band {} is {} "
          "there, {} "
          "here. Run kvdice calibrate for this model",
          path, made_for, f, s.omega[f], inv_freq[f]);
  const std::vector<float> norms = c.q_weight_norms();
  for (int l = 0; l < s.n_layers; ++l)
    if (!close_rel(norms[l], s.q_weight_norm[l], 1e-3))
      fail(
          "TriAttention statistics {} were made for another model ({}): layer {}'s q projection norm is {} "
          "there, {} "
          "here. Run kvdice calibrate for this model",
          path, made_for, l, s.q_weight_norm[l], norms[l]);
}

}  // namespace kvdice::policy
