// JSON via nlohmann::json, plus functions that name the file and field in every error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvdice {

using Json = nlohmann::json;

// The largest JSON file read (tokenizer.json of a 256k-token vocabulary is about 20 MB).
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{1} << 30;

// Parses JSON text, refusing duplicate keys in any object (nlohmann would silently keep the last one,
// so two readers of the same file could disagree); Error naming `where` on any problem.
Json parse_json_text(std::string_view text, const std::string& where);

// Parses a JSON file (a regular file, at most kMaxJsonFileBytes); throws Error naming the path on a
// missing or special file, a syntax error or a duplicate key.
Json read_json_file(const std::filesystem::path& path);

// Required field of a given type; throws Error naming `where` (usually the file) and the key.
// Integer types accept only JSON integers that fit the type (never a float, a bool or a wrapped value);
// floating types accept any finite JSON number in range; bool only true/false; strings only strings.
template <class T>
T json_require(const Json& object, const std::string& key, const std::string& where);

// Optional field: returns `fallback` when absent or null; wrong type is still an error.
template <class T>
T json_get_or(const Json& object, const std::string& key, T fallback, const std::string& where);

// One JSON value converted with the same checks as json_require; `what` names it ("'eos_token_id'").
template <class T>
T json_as(const Json& value, const std::string& what, const std::string& where);

}  // namespace kvdice
