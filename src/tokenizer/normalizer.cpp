#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace kvdice::tokenizer {

void require_valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(p + pos, static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
    if (n < 0) fail("tokenizer input: invalid UTF-8 at byte {} of {}", pos, text.size());
    pos += static_cast<std::size_t>(n);
  }
}

std::string nfc(std::string_view text) {
  // ASCII is already in NFC; most text is, so skip the allocation.
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                        static_cast<utf8proc_ssize_t>(text.size()), &out,
                        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("tokenizer input: NFC normalisation failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

char32_t utf8_decode_at(std::string_view text, std::size_t pos, std::size_t* length) {
  utf8proc_int32_t cp = 0;
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                            static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  KVDICE_CHECK(n > 0, "utf8_decode_at on invalid UTF-8 at {}", pos);
  if (length) *length = static_cast<std::size_t>(n);
  return static_cast<char32_t>(cp);
}

char32_t utf8_decode_before(std::string_view text, std::size_t end, std::size_t* length) {
  std::size_t start = end;
  do {
    --start;
  } while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80);
  if (length) *length = end - start;
  return utf8_decode_at(text.substr(0, end), start);
}

}  // namespace kvdice::tokenizer
