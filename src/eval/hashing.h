// sha256 of strings and files (OpenSSL EVP) and the model/tokenizer fingerprints a cell manifest
// records so results from another model or tokenizer are refused.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace kvdice::tokenizer {
class Tokenizer;
}

namespace kvdice::eval {

std::string sha256_hex(std::string_view bytes);
// Lowercase hex sha256 of a file's bytes; Error naming the file when unreadable.
std::string sha256_of_file(const std::filesystem::path& path);
// Fingerprint of a checkpoint (HF directory or .gguf file): sha256 over each file's name, size and
// its first and last 4 MiB. Reading tens of GB on every `eval run` would cost minutes; a changed
// checkpoint changes its header (config, tensor table) or its size.
std::string model_fingerprint(const std::filesystem::path& model_path);
// sha256 over every token's bytes, the BOS rule and the chat template source: equal exactly when
// the tokenizer encodes and decodes the same way, wherever it was loaded from.
std::string tokenizer_fingerprint(const tokenizer::Tokenizer& tokenizer);

}  // namespace kvdice::eval
