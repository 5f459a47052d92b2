// JSON via nlohmann::json, plus helpers that name the file and field in every error.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace kvdice {

using Json = nlohmann::json;

// Parses a JSON file; throws Error naming the path on a missing file or a syntax error.
Json read_json_file(const std::filesystem::path& path);

// Required field of a given type; throws Error naming `where` (usually the file) and the key.
template <class T>
T json_require(const Json& object, const std::string& key, const std::string& where);

// Optional field: returns `fallback` when absent or null; wrong type is still an error.
template <class T>
T json_get_or(const Json& object, const std::string& key, T fallback, const std::string& where);

}  // namespace kvdice
