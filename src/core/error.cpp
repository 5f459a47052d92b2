#include "core/error.h"

namespace kvdice {

std::string escape_for_message(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&out](unsigned char byte) { out += fmt::format("\\x{:02x}", byte); };
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        escape(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlongs, no surrogates, at most U+10FFFF) is kept whole.
    size_t len = 0;
    uint32_t min = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, min = 0x10000;
    }
    bool ok = len != 0 && i + len <= text.size();
    uint32_t cp = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    ok = ok && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

std::string quote_for_message(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes + 64) return escape_for_message(text);
  return escape_for_message(text.substr(0, max_bytes)) + fmt::format("... ({} bytes in all)", text.size());
}

namespace detail {

void check_failed(const char* condition, const char* file, int line, const std::string& message) {
  throw Error(fmt::format("internal check failed: {} ({}:{}): {}", condition, file, line,
                          quote_for_message(message)));
}

}  // namespace detail
}  // namespace kvdice
