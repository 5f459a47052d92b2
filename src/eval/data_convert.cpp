#include "eval/data_convert.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "eval/hashing.h"

namespace kvdice::eval {
namespace {

// The largest upstream file read (LiveCodeBench's largest shard is a few hundred MB).
constexpr uint64_t kMaxUpstreamBytes = uint64_t{4} << 30;
// The largest decoded private-test blob (zlib bomb guard).
constexpr size_t kMaxDecodedTests = size_t{1} << 30;

const char* type_name(const Json& j) {
  if (j.is_string()) return "a string";
  if (j.is_number_integer()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_boolean()) return "a boolean";
  if (j.is_null()) return "null";
  if (j.is_array()) return "an array";
  return "an object";
}

enum class Kind { String, Integer };

// The field's value, or Error naming the file, line and field.
const Json& require(const Json& object, const std::string& where, const char* field, Kind kind) {
  if (!object.contains(field)) fail("{}: field \"{}\" is missing", where, field);
  const Json& value = object[field];
  const bool ok = kind == Kind::String ? value.is_string() : value.is_number_integer();
  if (!ok)
    fail("{}: field \"{}\" must be {} (got {})", where, field,
         kind == Kind::String ? "a string" : "an integer", type_name(value));
  return value;
}

// The first of `names` present in `object`: a non-empty string. Error naming the first name.
std::string require_text(const Json& object, const std::string& where,
                         std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!object.contains(name)) continue;
    const Json& v = object[name];
    if (!v.is_string()) fail("{}: field \"{}\" must be a string (got {})", where, name, type_name(v));
    if (v.get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos)
      fail("{}: field \"{}\" is empty", where, name);
    return v.get<std::string>();
  }
  std::string others;
  for (auto it = names.begin() + 1; it != names.end(); ++it)
    others += std::string(others.empty() ? "" : ", ") + *it;
  fail("{}: field \"{}\" is missing{}", where, *names.begin(), others.empty() ? "" : " (nor " + others + ")");
}

// Optional upstream id under one of `names`: its text, or nullopt.
std::optional<std::string> optional_id(const Json& object, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!object.contains(name) || object[name].is_null()) continue;
    const Json& v = object[name];
    return v.is_string() ? v.get<std::string>() : v.dump();
  }
  return std::nullopt;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// ---- MATH-500 and HumanEval --------------------------------------------------------------------

Json convert_math500(const Json& in, const std::string& where) {
  for (const char* field : {"problem", "solution", "answer", "subject", "unique_id"})
    require(in, where, field, Kind::String);
  require(in, where, "level", Kind::Integer);
  return Json{{"id", in["unique_id"]},
              {"problem", in["problem"]},
              {"answer", in["answer"]},
              {"subject", in["subject"]},
              {"level", in["level"]}};
}

// Import lines of the prompt: a completion that restates only the function still needs them.
std::string import_lines(const std::string& prompt) {
  std::string out, line;
  std::istringstream lines(prompt);
  while (std::getline(lines, line))
    if (line.starts_with("import ") || line.starts_with("from ")) out += line + "\n";
  return out;
}

Json convert_humaneval(const Json& in, const std::string& where) {
  for (const char* field : {"task_id", "prompt", "canonical_solution", "test", "entry_point"})
    require(in, where, field, Kind::String);
  const std::string prompt = in["prompt"];
  // One test with no input: the program (imports, the completion's code, the upstream check)
  // passes when check(entry_point) raises nothing.
  return Json{{"id", in["task_id"]},
              {"prompt", prompt},
              {"entry_point", in["entry_point"]},
              {"preamble", import_lines(prompt)},
              {"check", in["test"]},
              {"tests", Json::array({Json{{"input", ""}, {"output", ""}}})}};
}

// ---- AIME and HMMT -----------------------------------------------------------------------------

// Question fields across the published AIME/HMMT exports: AI-MO/aimo-validation-aime and MathArena
// (problem), opencompass/AIME2025 (question), Maxwell-Jia/AIME_2024 (Problem).
const std::initializer_list<const char*> kQuestionFields = {"problem", "question", "Problem", "Question"};
const std::initializer_list<const char*> kIdFields = {"id", "ID", "problem_idx", "unique_id"};

// An AIME answer: an integer 0-999, as a JSON integer or a string of digits ("025" -> "25").
std::string aime_answer(const Json& in, const std::string& where) {
  const char* field = in.contains("answer") ? "answer" : in.contains("Answer") ? "Answer" : nullptr;
  if (!field) fail("{}: field \"answer\" is missing (nor Answer)", where);
  const Json& v = in[field];
  long long value = -1;
  if (v.is_number_integer()) {
    value = v.get<long long>();
  } else if (v.is_string()) {
    const std::string t = trim(v.get<std::string>());
    if (!t.empty() && t.size() <= 3 && std::all_of(t.begin(), t.end(), ::isdigit))
      value = std::stoll(t);
    else
      fail("{}: field \"{}\" must be an AIME answer, an integer 0-999 (got \"{}\")", where, field,
           v.get<std::string>());
  } else {
    fail("{}: field \"{}\" must be an AIME answer, an integer 0-999 (got {})", where, field, type_name(v));
  }
  if (value < 0 || value > 999)
    fail("{}: field \"{}\" must be an AIME answer, an integer 0-999 (got {})", where, field, value);
  return std::to_string(value);
}

Json convert_aime(const Json& in, const std::string& where, const std::string& id) {
  Json out{
      {"id", id}, {"problem", require_text(in, where, kQuestionFields)}, {"answer", aime_answer(in, where)}};
  if (in.contains("url") && in["url"].is_string()) out["url"] = in["url"];
  return out;
}

// An HMMT answer: non-empty LaTeX whose braces balance (a number is written as its JSON spelling).
std::string hmmt_answer(const Json& in, const std::string& where) {
  if (!in.contains("answer")) fail("{}: field \"answer\" is missing", where);
  const Json& v = in["answer"];
  if (v.is_number()) return v.dump();
  if (!v.is_string()) fail("{}: field \"answer\" must be a string (got {})", where, type_name(v));
  const std::string a = trim(v.get<std::string>());
  if (a.empty()) fail("{}: field \"answer\" is empty", where);
  int depth = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == '\\' && i + 1 < a.size()) {
      ++i;
      continue;
    }
    depth += a[i] == '{' ? 1 : a[i] == '}' ? -1 : 0;
    if (depth < 0) break;
  }
  if (depth != 0) fail("{}: field \"answer\" has unbalanced braces: \"{}\"", where, a);
  return a;
}

Json convert_hmmt(const Json& in, const std::string& where, const std::string& id) {
  Json out{
      {"id", id}, {"problem", require_text(in, where, kQuestionFields)}, {"answer", hmmt_answer(in, where)}};
  if (in.contains("problem_type")) {
    const Json& t = in["problem_type"];
    if (!t.is_array() || !std::all_of(t.begin(), t.end(), [](const Json& x) { return x.is_string(); }))
      fail("{}: field \"problem_type\" must be a list of strings (got {})", where, type_name(t));
    out["problem_type"] = t;
  }
  return out;
}

// ---- GPQA --------------------------------------------------------------------------------------

Json convert_gpqa(const Json& in, const std::string& where, const ConvertOptions& o) {
  const std::string record_id = require_text(in, where, {"Record ID"});
  const std::string question = trim(require_text(in, where, {"Question"}));
  std::vector<std::string> upstream = {trim(require_text(in, where, {"Correct Answer"}))};
  for (const char* f : {"Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"})
    upstream.push_back(trim(require_text(in, where, {f})));
  std::vector<int> order = {0, 1, 2, 3};
  if (o.shuffle_choices) order = gpqa_choice_order(o.choice_seed, record_id);
  Json choices = Json::array();
  std::string text = question + "\n";
  char answer = 0;
  for (int i = 0; i < 4; ++i) {
    const char letter = static_cast<char>('A' + i);
    choices.push_back(upstream[order[i]]);
    text += fmt::format("\n({}) {}", letter, upstream[order[i]]);
    if (order[i] == 0) answer = letter;
  }
  Json out{{"id", record_id},
           {"question", text},
           {"answer", std::string(1, answer)},
           {"choices", choices},
           {"choice_order", order}};
  for (const auto& [field, name] : {std::pair{"Subdomain", "subdomain"}, {"High-level domain", "domain"}})
    if (in.contains(field)) out[name] = in[field];
  return out;
}

// ---- LiveCodeBench -----------------------------------------------------------------------------

// LiveCodeBench's own prompt wording (lcb_runner/prompts/code_generation.py, generic models).
constexpr const char* kLcbIntro =
    "You will be given a question (problem specification) and will generate a correct Python program that "
    "matches the specification and passes all tests.\n\n";
constexpr const char* kLcbWithStarter =
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters.";
constexpr const char* kLcbWithoutStarter =
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the "
    "sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program "
    "runs, it reads the inputs, runs the algorithm and writes output to STDOUT.";

std::string base64_decode(std::string_view in, const std::string& where) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  for (char c : in) {
    if (c == '=') {
      ++pad;
      continue;
    }
    if (c == '\n' || c == '\r') continue;
    const size_t v = alphabet.find(c);
    if (v == std::string::npos || pad > 0) fail("{}: not base64 (character '{}')", where, c);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2) fail("{}: not base64 (bad padding)", where);
  return out;
}

std::string zlib_inflate(std::string_view in, const std::string& where) {
  z_stream z{};
  if (inflateInit(&z) != Z_OK) fail("{}: zlib could not start", where);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof(buffer);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      fail("{}: not zlib data ({})", where, z.msg ? z.msg : "truncated");
    }
    out.append(buffer, sizeof(buffer) - z.avail_out);
    if (out.size() > kMaxDecodedTests) {
      inflateEnd(&z);
      fail("{}: decoded tests exceed {} bytes", where, kMaxDecodedTests);
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      fail("{}: not zlib data (truncated)", where);
    }
  }
  inflateEnd(&z);
  return out;
}

// A pickle holding one str: PROTO, FRAME, (SHORT_)BINUNICODE(8), memo opcodes, STOP.
std::string unpickle_str(std::string_view p, const std::string& where) {
  size_t i = 0;
  std::optional<std::string> value;
  auto need = [&](size_t n) {
    if (n > p.size() - i) fail("{}: pickle ends early at byte {}", where, i);
  };
  auto le = [&](size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= uint64_t{static_cast<unsigned char>(p[i + k])} << (8 * k);
    i += n;
    return v;
  };
  while (true) {
    need(1);
    const unsigned char op = static_cast<unsigned char>(p[i++]);
    switch (op) {
      case 0x80:  // PROTO
        le(1);
        break;
      case 0x95:  // FRAME
        le(8);
        break;
      case 0x94:  // MEMOIZE
        break;
      case 'q':  // BINPUT
        le(1);
        break;
      case 'r':  // LONG_BINPUT
        le(4);
        break;
      case 0x8c:
      case 'X':
      case 0x8d: {  // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
        if (value) fail("{}: pickle holds more than one object; kvdice reads a single pickled str", where);
        const uint64_t n = le(op == 0x8c ? 1 : op == 'X' ? 4 : 8);
        need(n);
        value = std::string(p.substr(i, n));
        i += n;
        break;
      }
      case '.':  // STOP
        if (!value) fail("{}: pickle holds no str", where);
        return *value;
      default:
        fail(
            "{}: pickle opcode 0x{:02x} at byte {} is not supported: kvdice reads only a pickled str "
            "(protocols 2-5), which is what LiveCodeBench publishes",
            where, op, i - 1);
    }
  }
}

// [{"input", "output", "testtype"}] -> checked tests and their one testtype.
std::pair<Json, std::string> lcb_tests(const std::string& text, const std::string& where) {
  Json list;
  try {
    list = Json::parse(text);
  } catch (const Json::exception& e) {
    fail("{}: not valid JSON: {}", where, e.what());
  }
  if (!list.is_array()) fail("{}: must be a JSON list of tests (got {})", where, type_name(list));
  Json out = Json::array();
  std::string type;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string at = fmt::format("{} test {}", where, k);
    if (!list[k].is_object()) fail("{}: must be an object", at);
    for (const char* f : {"input", "output", "testtype"}) require(list[k], at, f, Kind::String);
    const std::string t = list[k]["testtype"];
    if (t != "stdin" && t != "functional")
      fail("{}: testtype must be stdin or functional (got \"{}\")", at, t);
    if (!type.empty() && t != type) fail("{}: testtype {} mixed with {}", at, t, type);
    type = t;
    out.push_back(Json{{"input", list[k]["input"]}, {"output", list[k]["output"]}});
  }
  return {out, type};
}

Json convert_lcb(const Json& in, const std::string& where) {
  for (const char* f : {"question_id", "question_title", "question_content", "platform", "contest_date",
                        "difficulty", "starter_code", "public_test_cases", "private_test_cases", "metadata"})
    require(in, where, f, Kind::String);
  const std::string difficulty = in["difficulty"];
  if (difficulty != "easy" && difficulty != "medium" && difficulty != "hard")
    fail("{}: field \"difficulty\" must be easy, medium or hard (got \"{}\")", where, difficulty);
  auto [pub, pub_type] = lcb_tests(in["public_test_cases"], where + ": field \"public_test_cases\"");
  const std::string priv_text = in["private_test_cases"];
  const std::string priv_where = where + ": field \"private_test_cases\"";
  const std::string priv_json =
      trim(priv_text).starts_with("[")
          ? priv_text
          : unpickle_str(zlib_inflate(base64_decode(priv_text, priv_where), priv_where), priv_where);
  auto [priv, priv_type] = lcb_tests(priv_json, priv_where);
  const std::string type = pub_type.empty() ? priv_type : pub_type;
  if (!pub_type.empty() && !priv_type.empty() && pub_type != priv_type)
    fail("{}: public tests are {} but private tests are {}", where, pub_type, priv_type);
  if (pub.empty() && priv.empty()) fail("{}: no tests (public and private are both empty)", where);
  Json metadata;
  try {
    metadata = Json::parse(in["metadata"].get<std::string>());
  } catch (const Json::exception& e) {
    fail("{}: field \"metadata\" is not valid JSON: {}", where, e.what());
  }
  const std::string starter = in["starter_code"];
  std::string prompt =
      std::string(kLcbIntro) + "Question: " + in["question_content"].get<std::string>() + "\n\n";
  prompt += starter.empty() ? std::string(kLcbWithoutStarter) + "\n```python\n# YOUR CODE HERE\n```\n\n"
                            : std::string(kLcbWithStarter) + "\n```python\n" + starter + "\n```\n\n";
  Json tests = pub;
  for (const Json& t : priv) tests.push_back(t);
  Json out{{"id", in["question_id"]},
           {"prompt", prompt},
           {"title", in["question_title"]},
           {"platform", in["platform"]},
           {"contest_date", in["contest_date"]},
           {"difficulty", difficulty},
           {"public_tests", pub.size()},
           {"tests", tests}};
  if (type == "functional") {
    if (!metadata.is_object() || !metadata.contains("func_name") || !metadata["func_name"].is_string())
      fail("{}: functional tests need \"func_name\" in field \"metadata\"", where);
    out["fn_name"] = metadata["func_name"];
  }
  return out;
}

// ---- Reading upstream files --------------------------------------------------------------------

struct UpstreamRecord {
  std::string where;  // "file:line" or "file: element N"
  int position = 0;   // 1-based
  Json object;
};

std::vector<UpstreamRecord> read_upstream(const std::filesystem::path& path, SourceFormat format) {
  const std::string name = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("cannot read {}: no such file", name);
  const std::string bytes = read_regular_file(path, kMaxUpstreamBytes);
  if (bytes.starts_with("PAR1") || path.extension() == ".parquet")
    fail(
        "{} is Parquet, which kvdice does not read; convert it to JSONL first: python3 -c \"import pandas as "
        "pd; pd.read_parquet('{}').to_json('{}.jsonl', orient='records', lines=True, force_ascii=False)\"",
        name, name, path.stem().string());
  std::vector<UpstreamRecord> records;
  if (format == SourceFormat::Gpqa) {
    for (auto& [line, object] : parse_csv(bytes, name))
      records.push_back({fmt::format("{}:{}", name, line), static_cast<int>(records.size()) + 1, object});
    return records;
  }
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  // MATH-500 and HumanEval are published as JSONL only; the others also come as JSON arrays.
  const bool jsonl_only = format == SourceFormat::Math500 || format == SourceFormat::HumanEval;
  if (!jsonl_only && first != std::string::npos && bytes[first] == '[') {  // a JSON array of records
    const Json array = parse_json_text(bytes, name);
    for (size_t k = 0; k < array.size(); ++k) {
      const std::string where = fmt::format("{}: element {}", name, k + 1);
      if (!array[k].is_object()) fail("{}: each element must be a JSON object", where);
      records.push_back({where, static_cast<int>(k) + 1, array[k]});
    }
    return records;
  }
  size_t start = 0;
  int line_no = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view line = std::string_view(bytes).substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", name, line_no);
    Json object;
    try {
      object = Json::parse(line);
    } catch (const Json::exception& e) {
      fail("{}: not valid JSON: {}", where, e.what());
    }
    if (!object.is_object()) fail("{}: each line must be a JSON object", where);
    records.push_back({where, static_cast<int>(records.size()) + 1, std::move(object)});
  }
  return records;
}

// Each upstream format: its --format name, the files it reads, and the task preset (docs/eval.md) whose
// grader the dataset needs.
struct FormatInfo {
  SourceFormat format;
  const char* name;
  const char* source;
  const char* task;
};
constexpr FormatInfo kFormats[] = {
    {SourceFormat::Math500, "math500", "Hugging Face HuggingFaceH4/MATH-500 test.jsonl", "math500"},
    {SourceFormat::HumanEval, "humaneval", "openai/human-eval HumanEval.jsonl",
     "humaneval (a task file with grader code)"},
    {SourceFormat::Aime, "aime",
     "AIME problems (AI-MO/aimo-validation-aime, opencompass/AIME2025, MathArena/aime_2025 exports)", "aime"},
    {SourceFormat::Hmmt, "hmmt", "MathArena/hmmt_feb_2025 (or another MathArena competition) export", "hmmt"},
    {SourceFormat::Gpqa, "gpqa", "GPQA (idavidrein/gpqa) gpqa_diamond.csv", "gpqa"},
    {SourceFormat::LiveCodeBench, "livecodebench", "livecodebench/code_generation_lite test*.jsonl",
     "livecodebench"},
};

const FormatInfo& info(SourceFormat f) {
  for (const FormatInfo& i : kFormats)
    if (i.format == f) return i;
  fail("unknown dataset source format {}", static_cast<int>(f));
}
const char* source_description(SourceFormat f) { return info(f).source; }
const char* task_for(SourceFormat f) { return info(f).task; }

}  // namespace

std::vector<std::pair<int, Json>> parse_csv(std::string_view text, const std::string& where) {
  std::vector<std::vector<std::string>> rows;
  std::vector<int> row_lines;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, field_started = false;
  int line = 1, row_line = 1;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte order mark
  auto end_field = [&] {
    row.push_back(std::move(field));
    field.clear();
    field_started = false;
  };
  auto end_row = [&] {
    end_field();
    if (!(row.size() == 1 && row[0].empty())) {
      rows.push_back(std::move(row));
      row_lines.push_back(row_line);
    }
    row.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"') {
      if (field_started) fail("{}:{}: a quote inside an unquoted field", where, line);
      quoted = field_started = true;
    } else if (c == ',') {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_row();
      ++line;
      row_line = line;
    } else {
      field += c;
      field_started = true;
    }
  }
  if (quoted) fail("{}:{}: a quoted field is not closed by the end of the file", where, row_line);
  if (field_started || !row.empty()) end_row();
  if (rows.empty()) fail("{} holds no CSV header", where);
  const auto& header = rows[0];
  std::set<std::string> seen;
  for (const auto& h : header)
    if (!seen.insert(h).second) fail("{}:1: column \"{}\" appears twice in the header", where, h);
  std::vector<std::pair<int, Json>> out;
  for (size_t r = 1; r < rows.size(); ++r) {
    if (rows[r].size() != header.size())
      fail("{}:{}: {} fields, the header has {}", where, row_lines[r], rows[r].size(), header.size());
    Json object = Json::object();
    for (size_t k = 0; k < header.size(); ++k) object[header[k]] = rows[r][k];
    out.emplace_back(row_lines[r], std::move(object));
  }
  return out;
}

std::string decode_lcb_tests(std::string_view encoded, const std::string& where) {
  if (trim(encoded).starts_with("[")) return std::string(encoded);
  return unpickle_str(zlib_inflate(base64_decode(encoded, where), where), where);
}

std::vector<int> gpqa_choice_order(uint64_t seed, const std::string& record_id) {
  // Fisher-Yates driven by sha256("<seed>:<record id>"): the order depends on the problem alone, not
  // on its row or on the other rows, so a subset of the file converts to the same choices.
  const std::string digest = sha256_hex(fmt::format("{}:{}", seed, record_id));
  std::vector<int> order = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) {
    const uint32_t draw = static_cast<uint32_t>(std::stoul(digest.substr(8 * (3 - i), 8), nullptr, 16));
    std::swap(order[i], order[draw % static_cast<uint32_t>(i + 1)]);
  }
  return order;
}

SourceFormat source_format_from_name(const std::string& name) {
  for (const FormatInfo& i : kFormats)
    if (name == i.name) return i.format;
  fail("--format must be math500, humaneval, aime, hmmt, gpqa or livecodebench (got '{}')", name);
}

const char* source_format_name(SourceFormat f) { return info(f).name; }

ConvertSummary convert_dataset(const ConvertOptions& o) {
  if (o.inputs.empty()) fail("no input file");
  if (!o.expected_sha256.empty() && o.expected_sha256.size() != o.inputs.size())
    fail("--sha256 given {} times for {} inputs: give one per --in, in order", o.expected_sha256.size(),
         o.inputs.size());
  if (o.difficulty && o.format != SourceFormat::LiveCodeBench)
    fail("--difficulty applies to livecodebench only");
  if (o.difficulty && *o.difficulty != "easy" && *o.difficulty != "medium" && *o.difficulty != "hard")
    fail("--difficulty must be easy, medium or hard (got '{}')", *o.difficulty);
  ConvertSummary summary;
  std::string converted;
  std::set<std::string> ids;
  Json inputs = Json::array();
  for (size_t n = 0; n < o.inputs.size(); ++n) {
    const auto& path = o.inputs[n];
    const auto records = read_upstream(path, o.format);
    const std::string sha = sha256_of_file(path);
    if (!o.expected_sha256.empty() && o.expected_sha256[n] != sha)
      fail("{} has sha256 {}, not the pinned {}: another version of the file", path.string(), sha,
           o.expected_sha256[n]);
    summary.input_sha256.push_back(sha);
    int kept = 0;
    // Pooled math files (AIME 2025 I and II) share upstream ids 1..15: the file's stem prefixes them.
    const std::string stem = path.stem().string();
    for (const auto& r : records) {
      Json out;
      switch (o.format) {
        case SourceFormat::Math500:
          out = convert_math500(r.object, r.where);
          break;
        case SourceFormat::HumanEval:
          out = convert_humaneval(r.object, r.where);
          break;
        case SourceFormat::Aime:
        case SourceFormat::Hmmt: {
          const std::string id =
              stem + "/" + optional_id(r.object, kIdFields).value_or(std::to_string(r.position));
          out = o.format == SourceFormat::Aime ? convert_aime(r.object, r.where, id)
                                               : convert_hmmt(r.object, r.where, id);
          break;
        }
        case SourceFormat::Gpqa:
          out = convert_gpqa(r.object, r.where, o);
          break;
        case SourceFormat::LiveCodeBench:
          out = convert_lcb(r.object, r.where);
          if (o.difficulty && out["difficulty"] != *o.difficulty) continue;
          break;
      }
      const std::string id = out["id"].get<std::string>();
      if (!ids.insert(id).second) fail("{}: duplicate id \"{}\"", r.where, id);
      converted += out.dump() + "\n";
      ++kept;
    }
    if (records.empty()) fail("{} holds no problems", path.string());
    inputs.push_back(
        Json{{"path", path.string()}, {"sha256", sha}, {"records", records.size()}, {"problems", kept}});
    summary.problems += kept;
  }
  if (summary.problems == 0) fail("no problem is left after --difficulty {}", o.difficulty.value_or(""));

  write_file_atomically(o.output, converted);  // a failed conversion leaves no half file
  summary.manifest = o.output.string() + ".manifest.json";
  Json manifest = {{"source_format", source_format_name(o.format)},
                   {"source", source_description(o.format)},
                   {"task", task_for(o.format)},
                   {"source_path", o.inputs[0].string()},
                   {"source_sha256", summary.input_sha256[0]},
                   {"inputs", inputs},
                   {"problems", summary.problems},
                   {"dataset_sha256", sha256_hex(converted)}};
  if (o.format == SourceFormat::Gpqa)
    manifest["choices"] = o.shuffle_choices ? Json{{"order", "sha256(\"<seed>:<Record ID>\") Fisher-Yates"},
                                                   {"seed", o.choice_seed}}
                                            : Json{{"order", "upstream: the correct answer is (A)"}};
  if (o.difficulty) manifest["difficulty"] = *o.difficulty;
  write_file_atomically(summary.manifest, manifest.dump(2) + "\n");
  return summary;
}

}  // namespace kvdice::eval
