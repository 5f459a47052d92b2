// GPT-2 byte-level alphabet: every byte is shown as one printable Unicode character ("Ġ" for a space),
// so that BPE vocabularies can be stored as text. Also the UTF-8 functions the tokenizer needs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvdice::tokenizer {

// UTF-8 of the character standing for `byte`.
const std::string& byte_symbol(unsigned char byte);
// Maps raw bytes to their byte-level characters (UTF-8).
std::string bytes_to_symbols(std::string_view bytes);
// Inverse mapping as the HF ByteLevel decoder does it: when every character of `token` is a byte-level
// symbol the bytes they stand for, otherwise the token's own UTF-8 (added tokens such as "<|im_end|>").
std::string symbols_to_bytes(std::string_view token);

// Length of the UTF-8 sequence starting with `lead` (1 for a stray continuation or invalid byte).
std::size_t utf8_sequence_length(unsigned char lead);
// Position where a complete-UTF-8 prefix of `bytes` ends: trailing bytes that begin a multi-byte
// character not yet finished are left out; everything else (invalid bytes included) is complete.
std::size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace kvdice::tokenizer
