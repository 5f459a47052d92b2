#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/split_regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace kvdice::tokenizer {

const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread JIT stack: the default 32 KiB runs out on long runs of whitespace or punctuation.
struct JitScratch {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  JitScratch() {
    KVDICE_CHECK(stack && context, "PCRE2 JIT stack allocation failed");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~JitScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

}  // namespace

struct SplitRegex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::string oniguruma_to_pcre2(std::string_view pattern) {
  // Unicode White_Space, which is Oniguruma's \s; PCRE2's differs in U+0085 and U+180E.
  constexpr std::string_view kSpaces =
      R"(\t\n\x{0b}\f\r\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";
  std::string out;
  out.reserve(pattern.size() + 64);
  int class_depth = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[++i];
      if (e == 's') {
        out += class_depth > 0 ? std::string(kSpaces) : "[" + std::string(kSpaces) + "]";
      } else if (e == 'S') {
        if (class_depth > 0) fail("split regex: \\S inside a character class is not supported: {}", pattern);
        out += "[^" + std::string(kSpaces) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

SplitRegex::SplitRegex(std::string_view pattern, std::string_view where)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  std::string translated = oniguruma_to_pcre2(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!compiled_->code)
    fail("{}: split regex does not compile at offset {}: {} (pattern {})", where, offset,
         pcre2_message(error), pattern);
  // Without JIT the interpreter still matches correctly, only slower.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;
SplitRegex::~SplitRegex() = default;

void SplitRegex::split(std::string_view text, std::vector<std::string_view>& out) const {
  thread_local JitScratch scratch;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  KVDICE_CHECK(match != nullptr, "PCRE2 match data allocation failed");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap_start = 0;
  std::size_t pos = 0;
  // The caller has validated the UTF-8 once, so PCRE2 need not check it on every call.
  uint32_t options = PCRE2_NO_UTF_CHECK;
  while (pos < text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), pos, options, match.get(), scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("tokenizer: split regex failed on a {}-byte text: {}", text.size(), pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    std::size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // an empty match splits nothing; step over one character
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > gap_start) out.push_back(text.substr(gap_start, begin - gap_start));
    out.push_back(text.substr(begin, end - begin));
    gap_start = pos = end;
  }
  if (gap_start < text.size()) out.push_back(text.substr(gap_start));
}

}  // namespace kvdice::tokenizer
