#include "core/json.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"

namespace kvdice {

Json parse_json_text(std::string_view text, const std::string& where) {
  // One key set per open object; the callback sees every key before its value.
  std::vector<std::unordered_set<std::string>> open_objects;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.back().insert(parsed.get<std::string>()).second) {
          fail("{}: duplicate key '{}' in a JSON object (at depth {})", where, parsed.get<std::string>(),
               depth);
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    fail("{}: invalid JSON: {}", where, e.what());
  }
}

Json read_json_file(const std::filesystem::path& path) {
  return parse_json_text(read_regular_file(path, kMaxJsonFileBytes), path.string());
}

template <class T>
T json_as(const Json& value, const std::string& what, const std::string& where) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) fail("{}: {} must be true or false, got {}", where, what, value.dump());
    return value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!value.is_number_integer()) fail("{}: {} must be an integer, got {}", where, what, value.dump());
    bool fits;
    if (value.is_number_unsigned()) {
      fits = value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    } else {
      const int64_t v = value.get<int64_t>();
      fits = v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
             (v < 0 || static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
    }
    if (!fits) {
      fail("{}: {} is {}, outside the supported range [{}, {}]", where, what, value.dump(),
           std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    }
    return value.get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) fail("{}: {} must be a number, got {}", where, what, value.dump());
    const double v = value.get<double>();
    if (!std::isfinite(v) || std::abs(v) > static_cast<double>(std::numeric_limits<T>::max())) {
      fail("{}: {} is {}, outside the range of a {}-bit float", where, what, value.dump(), 8 * sizeof(T));
    }
    return static_cast<T>(v);
  } else {
    if (!value.is_string()) fail("{}: {} must be a string, got {}", where, what, value.dump());
    return value.get<std::string>();
  }
}

template <class T>
T json_require(const Json& object, const std::string& key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) fail("{}: missing required field '{}'", where, key);
  return json_as<T>(*it, "field '" + key + "'", where);
}

template <class T>
T json_get_or(const Json& object, const std::string& key, T fallback, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  return json_as<T>(*it, "field '" + key + "'", where);
}

#define KVDICE_JSON_INSTANTIATE(T)                                                   \
  template T json_require<T>(const Json&, const std::string&, const std::string&);   \
  template T json_get_or<T>(const Json&, const std::string&, T, const std::string&); \
  template T json_as<T>(const Json&, const std::string&, const std::string&);
KVDICE_JSON_INSTANTIATE(int)
KVDICE_JSON_INSTANTIATE(int64_t)
KVDICE_JSON_INSTANTIATE(uint64_t)
KVDICE_JSON_INSTANTIATE(double)
KVDICE_JSON_INSTANTIATE(float)
KVDICE_JSON_INSTANTIATE(bool)
KVDICE_JSON_INSTANTIATE(std::string)
#undef KVDICE_JSON_INSTANTIATE

}  // namespace kvdice
