// Text checks and the one normaliser byte-level BPE vocabularies use (Unicode NFC, via utf8proc).
#pragma once

#include <string>
#include <string_view>

namespace kvdice::tokenizer {

// Throws Error naming the byte offset when `text` is not valid UTF-8.
void require_valid_utf8(std::string_view text);
std::string nfc(std::string_view text);

// Unicode White_Space, as Rust's char::is_whitespace (used for added tokens' lstrip/rstrip).
bool is_unicode_whitespace(char32_t cp);
// Letters, digits and '_' (Rust's is_alphanumeric or '_'): word characters for single_word tokens.
bool is_word_char(char32_t cp);
// Decodes the code point starting at `pos` / ending just before `end` of valid UTF-8 text.
char32_t utf8_decode_at(std::string_view text, std::size_t pos, std::size_t* length = nullptr);
char32_t utf8_decode_before(std::string_view text, std::size_t end, std::size_t* length = nullptr);

}  // namespace kvdice::tokenizer
