#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>
#include <optional>

namespace kvdice::tokenizer {
namespace {

std::string encode_utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

struct Tables {
  std::array<std::string, 256> symbol;       // byte -> UTF-8 of its character
  std::array<std::int16_t, 512> byte_of_cp;  // code point (< 512) -> byte, -1 when none
};

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes are
// numbered from U+0100 upwards in byte order.
const Tables& tables() {
  static const Tables t = [] {
    Tables t{};
    t.byte_of_cp.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      t.symbol[b] = encode_utf8(cp);
      t.byte_of_cp[cp] = static_cast<std::int16_t>(b);
    }
    return t;
  }();
  return t;
}

}  // namespace

const std::string& byte_symbol(unsigned char byte) { return tables().symbol[byte]; }

std::string bytes_to_symbols(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.symbol[static_cast<unsigned char>(c)];
  return out;
}

std::string symbols_to_bytes(std::string_view token) {
  const auto& t = tables();
  std::string out;
  out.reserve(token.size());
  // Byte-level symbols are all below U+0200, i.e. one or two UTF-8 bytes.
  for (std::size_t i = 0; i < token.size();) {
    auto lead = static_cast<unsigned char>(token[i]);
    int cp = -1;
    if (lead < 0x80) {
      cp = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((lead & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    }
    if (cp < 0 || cp >= 512 || t.byte_of_cp[cp] < 0) return std::string(token);
    out += static_cast<char>(t.byte_of_cp[cp]);
  }
  return out;
}

std::size_t utf8_sequence_length(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

std::size_t utf8_complete_prefix(std::string_view bytes) {
  // An unfinished character is at most 3 bytes long, so only the tail needs a look.
  std::size_t n = bytes.size();
  std::size_t start = n >= 3 ? n - 3 : 0;
  for (std::size_t i = n; i-- > start;) {
    auto b = static_cast<unsigned char>(bytes[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    std::size_t need = utf8_sequence_length(b);
    if (need == 1 || i + need <= n) return n;
    for (std::size_t j = i + 1; j < n; ++j)
      if ((static_cast<unsigned char>(bytes[j]) & 0xC0) != 0x80) return n;  // broken, not unfinished
    return i;
  }
  return n;
}

}  // namespace kvdice::tokenizer
