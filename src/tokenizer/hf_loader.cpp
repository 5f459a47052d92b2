#include "tokenizer/hf_loader.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "tokenizer/split_regex.h"

namespace kvdice::tokenizer {
namespace {

using Where = const std::string&;

const Json* find_non_null(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

void read_vocab(const Json& model, Where where, TokenizerParts& parts) {
  const Json* vocab = find_non_null(model, "vocab");
  if (!vocab || !vocab->is_object()) fail("{}: model.vocab must be an object of token -> id", where);
  for (const auto& [token, id_json] : vocab->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() >= (1 << 24))
      fail("{}: model.vocab['{}'] must be an id in [0, 2^24), got {}", where, token, id_json.dump());
    auto id = static_cast<std::size_t>(id_json.get<int64_t>());
    if (id >= parts.vocab.size()) parts.vocab.resize(id + 1);
    if (!parts.vocab[id].empty())
      fail("{}: model.vocab gives id {} to both '{}' and '{}'", where, id, parts.vocab[id], token);
    parts.vocab[id] = token;
  }
}

void read_merges(const Json& model, Where where, TokenizerParts& parts) {
  const Json* merges = find_non_null(model, "merges");
  if (!merges || !merges->is_array()) fail("{}: model.merges must be an array", where);
  parts.merges.reserve(merges->size());
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const Json& m = (*merges)[i];
    // Older files write "a b"; tokenizers >= 0.20 writes ["a", "b"] (tokens may then contain spaces).
    if (m.is_string()) {
      const auto& s = m.get_ref<const std::string&>();
      auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail("{}: model.merges[{}] = '{}' is not two tokens separated by one space", where, i, s);
      parts.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      parts.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"], got {}", where, i, m.dump());
    }
  }
}

void read_model(const Json& root, Where where, TokenizerParts& parts) {
  const Json* model = find_non_null(root, "model");
  if (!model || !model->is_object()) fail("{}: missing required object 'model'", where);
  std::string type = json_get_or<std::string>(*model, "type", "BPE", where + ": model");
  if (type != "BPE") fail("{}: model.type is '{}'; only byte-level 'BPE' is supported", where, type);
  if (json_get_or<bool>(*model, "byte_fallback", false, where + ": model"))
    fail("{}: model.byte_fallback is true (SentencePiece-style BPE); only byte-level BPE is supported",
         where);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!json_get_or<std::string>(*model, key, "", where + ": model").empty())
      fail("{}: model.{} is set; byte-level BPE vocabularies do not use it", where, key);
  if (const Json* dropout = find_non_null(*model, "dropout");
      dropout && (!dropout->is_number() || dropout->get<double>() != 0.0))
    fail("{}: model.dropout is {}; inference needs deterministic BPE (null)", where, dropout->dump());
  read_vocab(*model, where, parts);
  read_merges(*model, where, parts);
  if (const Json* ignore = find_non_null(*model, "ignore_merges")) {
    if (!ignore->is_boolean()) fail("{}: model.ignore_merges must be a boolean", where);
    parts.ignore_merges = ignore->get<bool>();
  } else {
    parts.ignore_merges = false;
  }
}

void read_added_tokens(const Json& root, Where where, TokenizerParts& parts) {
  const Json* added = find_non_null(root, "added_tokens");
  if (!added) return;
  if (!added->is_array()) fail("{}: added_tokens must be an array", where);
  for (std::size_t i = 0; i < added->size(); ++i) {
    const Json& t = (*added)[i];
    std::string at = fmt::format("{}: added_tokens[{}]", where, i);
    AddedToken token;
    token.id = json_require<int>(t, "id", at);
    token.content = json_require<std::string>(t, "content", at);
    if (token.id < 0 || token.id >= (1 << 24)) fail("{}: id {} out of range", at, token.id);
    if (token.content.empty()) fail("{}: empty content", at);
    token.special = json_get_or<bool>(t, "special", false, at);
    token.lstrip = json_get_or<bool>(t, "lstrip", false, at);
    token.rstrip = json_get_or<bool>(t, "rstrip", false, at);
    token.normalized = json_get_or<bool>(t, "normalized", !token.special, at);
    token.single_word = json_get_or<bool>(t, "single_word", false, at);
    parts.added.push_back(std::move(token));
  }
}

void read_normalizer(const Json& root, Where where, TokenizerParts& parts) {
  const Json* normalizer = find_non_null(root, "normalizer");
  if (!normalizer) return;
  auto one = [&](const Json& n) {
    std::string type = json_require<std::string>(n, "type", where + ": normalizer");
    if (type != "NFC")
      fail("{}: normalizer type '{}' is not supported (expected null, NFC, or a Sequence of NFC)", where,
           type);
    parts.nfc = true;
  };
  std::string type = json_require<std::string>(*normalizer, "type", where + ": normalizer");
  if (type == "Sequence") {
    const Json* list = find_non_null(*normalizer, "normalizers");
    if (!list || !list->is_array()) fail("{}: normalizer.normalizers must be an array", where);
    for (const auto& n : *list) one(n);
  } else {
    one(*normalizer);
  }
}

void read_pre_tokenizer(const Json& root, Where where, TokenizerParts& parts) {
  const Json* pre = find_non_null(root, "pre_tokenizer");
  if (!pre)
    fail("{}: pre_tokenizer is null; a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer", where);
  bool byte_level_seen = false;
  auto one = [&](const Json& p) {
    std::string at = where + ": pre_tokenizer";
    std::string type = json_require<std::string>(p, "type", at);
    if (type == "Split") {
      if (byte_level_seen) fail("{}: a Split after ByteLevel is not supported", at);
      std::string behavior = json_require<std::string>(p, "behavior", at);
      if (behavior != "Isolated")
        fail("{}: Split behavior '{}' is not supported (expected Isolated)", at, behavior);
      if (json_get_or<bool>(p, "invert", false, at)) fail("{}: Split with invert true is not supported", at);
      const Json* pattern = find_non_null(p, "pattern");
      if (!pattern || !pattern->is_object()) fail("{}: Split needs pattern {{\"Regex\": ...}}", at);
      if (pattern->contains("Regex")) {
        parts.split_patterns.push_back(json_require<std::string>(*pattern, "Regex", at + ".pattern"));
      } else {
        // A literal string: quote it so the regex engine takes it verbatim.
        std::string literal = json_require<std::string>(*pattern, "String", at + ".pattern");
        if (literal.find("\\E") != std::string::npos) fail("{}: Split string pattern contains \\E", at);
        parts.split_patterns.push_back("\\Q" + literal + "\\E");
      }
    } else if (type == "ByteLevel") {
      if (byte_level_seen) fail("{}: two ByteLevel pre-tokenizers", at);
      byte_level_seen = true;
      parts.add_prefix_space = json_get_or<bool>(p, "add_prefix_space", false, at);
      if (parts.add_prefix_space && !parts.split_patterns.empty())
        fail("{}: ByteLevel add_prefix_space after a Split is not supported", at);
      if (json_get_or<bool>(p, "use_regex", true, at)) parts.split_patterns.push_back(kGpt2Pattern);
    } else {
      fail("{}: pre-tokenizer type '{}' is not supported (expected Split, ByteLevel or a Sequence of them)",
           at, type);
    }
  };
  std::string type = json_require<std::string>(*pre, "type", where + ": pre_tokenizer");
  if (type == "Sequence") {
    const Json* list = find_non_null(*pre, "pretokenizers");
    if (!list || !list->is_array()) fail("{}: pre_tokenizer.pretokenizers must be an array", where);
    for (const auto& p : *list) one(p);
  } else {
    one(*pre);
  }
  if (!byte_level_seen)
    fail("{}: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported", where);
}

// BOS as TemplateProcessing adds it (Llama-3): its `single` template starts with a special token.
void read_post_processor(const Json& root, Where where, TokenizerParts& parts) {
  const Json* post = find_non_null(root, "post_processor");
  if (!post) return;
  auto one = [&](const Json& p) {
    std::string at = where + ": post_processor";
    std::string type = json_require<std::string>(p, "type", at);
    if (type == "ByteLevel") return;
    if (type != "TemplateProcessing")
      fail("{}: post-processor type '{}' is not supported (expected ByteLevel or TemplateProcessing)", at,
           type);
    const Json* single = find_non_null(p, "single");
    if (!single || !single->is_array() || single->empty()) fail("{}: TemplateProcessing needs 'single'", at);
    for (std::size_t i = 0; i < single->size(); ++i) {
      const Json& piece = (*single)[i];
      if (piece.contains("Sequence")) continue;
      if (i != 0 || !piece.contains("SpecialToken"))
        fail("{}: TemplateProcessing 'single' may only put one special token before the text", at);
      std::string name = json_require<std::string>(piece["SpecialToken"], "id", at + ".single[0]");
      const Json* specials = find_non_null(p, "special_tokens");
      if (!specials || !specials->contains(name)) fail("{}: special_tokens lacks '{}'", at, name);
      // find(), not operator[]: on a const object a missing key is undefined behaviour, not an error.
      const Json& special = specials->find(name).value();
      const Json* ids = special.is_object() ? find_non_null(special, "ids") : nullptr;
      if (ids == nullptr || !ids->is_array() || ids->size() != 1)
        fail("{}: special_tokens['{}'].ids must hold exactly one id", at, name);
      parts.bos_id = json_as<int>((*ids)[0], fmt::format("special_tokens['{}'].ids[0]", name), at);
      parts.add_bos = true;
    }
  };
  std::string type = json_require<std::string>(*post, "type", where + ": post_processor");
  if (type == "Sequence") {
    const Json* list = find_non_null(*post, "processors");
    if (!list || !list->is_array()) fail("{}: post_processor.processors must be an array", where);
    for (const auto& p : *list) one(p);
  } else {
    one(*post);
  }
}

void read_decoder(const Json& root, Where where) {
  const Json* decoder = find_non_null(root, "decoder");
  if (!decoder) return;
  std::string type = json_require<std::string>(*decoder, "type", where + ": decoder");
  if (type != "ByteLevel") fail("{}: decoder type '{}' is not supported (expected ByteLevel)", where, type);
}

std::optional<int> find_token(const TokenizerParts& parts, const std::string& content) {
  for (const auto& t : parts.added)
    if (t.content == content) return t.id;
  for (std::size_t id = 0; id < parts.vocab.size(); ++id)
    if (parts.vocab[id] == content) return static_cast<int>(id);
  return std::nullopt;
}

void read_config(const std::filesystem::path& dir, TokenizerParts& parts) {
  auto path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(path)) {
    std::string where = path.string();
    Json config = read_json_file(path);
    if (const Json* tmpl = find_non_null(config, "chat_template")) {
      if (tmpl->is_string()) {
        parts.chat_template = tmpl->get<std::string>();
      } else if (tmpl->is_array()) {
        std::vector<std::string> names;
        for (const auto& entry : *tmpl) {
          std::string name = json_require<std::string>(entry, "name", where + ": chat_template[]");
          if (name == "default") parts.chat_template = json_require<std::string>(entry, "template", where);
          names.push_back(name);
        }
        if (parts.chat_template.empty())
          fail("{}: chat_template list has no 'default' entry (has: {})", where, fmt::join(names, ", "));
      } else {
        fail("{}: chat_template must be a string or a list of {{name, template}}", where);
      }
    }
    if (const Json* bos = find_non_null(config, "bos_token")) {
      std::string content = bos->is_object()
                                ? json_require<std::string>(*bos, "content", where + ": bos_token")
                            : bos->is_string() ? bos->get<std::string>()
                                               : "";
      if (content.empty()) fail("{}: bos_token must be a string or {{\"content\": ...}}", where);
      auto id = find_token(parts, content);
      if (!id) fail("{}: bos_token '{}' is not a token of tokenizer.json", where, content);
      if (parts.bos_id && *parts.bos_id != *id)
        fail("{}: bos_token '{}' (id {}) differs from the post-processor's BOS id {}", where, content, *id,
             *parts.bos_id);
      parts.bos_id = id;
    }
    if (json_get_or<bool>(config, "add_bos_token", false, where)) {
      if (!parts.bos_id) fail("{}: add_bos_token is true but no bos_token is given", where);
      parts.add_bos = true;
    }
  }
  // Newer transformers save the template in its own file.
  if (parts.chat_template.empty() && std::filesystem::exists(dir / "chat_template.jinja"))
    parts.chat_template = read_regular_file(dir / "chat_template.jinja", kMaxJsonFileBytes);
}

}  // namespace

TokenizerParts tokenizer_parts_from_json(const Json& root, const std::string& where) {
  if (!root.is_object()) fail("{}: expected a JSON object", where);
  TokenizerParts parts;
  parts.source = where;
  read_model(root, where, parts);
  read_added_tokens(root, where, parts);
  read_normalizer(root, where, parts);
  read_pre_tokenizer(root, where, parts);
  read_post_processor(root, where, parts);
  read_decoder(root, where);
  return parts;
}

TokenizerParts read_hf_tokenizer(const std::filesystem::path& dir) {
  auto path = dir / "tokenizer.json";
  TokenizerParts parts = tokenizer_parts_from_json(read_json_file(path), path.string());
  read_config(dir, parts);
  return parts;
}

}  // namespace kvdice::tokenizer
