#include "core/json.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kvdice {

Json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}: no such file or not readable", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return Json::parse(buffer.str());
  } catch (const Json::parse_error& e) {
    fail("{}: invalid JSON: {}", path.string(), e.what());
  }
}

template <class T>
T json_require(const Json& object, const std::string& key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) fail("{}: missing required field '{}'", where, key);
  try {
    return it->get<T>();
  } catch (const Json::exception& e) {
    fail("{}: field '{}' has the wrong type ({})", where, key, e.what());
  }
}

template <class T>
T json_get_or(const Json& object, const std::string& key, T fallback, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const Json::exception& e) {
    fail("{}: field '{}' has the wrong type ({})", where, key, e.what());
  }
}

#define KVDICE_JSON_INSTANTIATE(T)                                                 \
  template T json_require<T>(const Json&, const std::string&, const std::string&); \
  template T json_get_or<T>(const Json&, const std::string&, T, const std::string&);
KVDICE_JSON_INSTANTIATE(int)
KVDICE_JSON_INSTANTIATE(int64_t)
KVDICE_JSON_INSTANTIATE(double)
KVDICE_JSON_INSTANTIATE(float)
KVDICE_JSON_INSTANTIATE(bool)
KVDICE_JSON_INSTANTIATE(std::string)
#undef KVDICE_JSON_INSTANTIATE

}  // namespace kvdice
