// Bad-input matrices for the command line (docs/hardening.md), run against the real binary: flags that would be
// narrowed, wrapped or ignored (classes 2 and 7), FIFOs and devices in place of checkpoint members
// (class 3), output lost on a full device (class 4), names that must be printed safely (class 6), and
// `inspect --check` refusing exactly what `generate` refuses (class 8). Every row must exit non-zero with
// a message naming the problem, within the runner's alarm (a hang fails the test).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli/run_command.h"
#include "core/file_io.h"
#include "core/json.h"

namespace kvdice::testing {
namespace {
namespace fs = std::filesystem;

const std::string kFixtures = KVDICE_FIXTURES_DIR;
const std::string kModel = kFixtures + "/qwen3";
const std::string kChatmlModel = kFixtures + "/qwen2";  // chatml: no thinking switch

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct Row {
  std::vector<std::string> args;
  std::string message;  // must appear in stderr
};

void expect_all_fail(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    std::string joined;
    for (const auto& a : row.args) joined += a + " ";
    SCOPED_TRACE(joined);
    const CommandResult r = run_kvdice(row.args, {}, "", 120);
    // 1 for kvdice errors, CLI11's own code (100 + n) for flags it refuses; never 0, never a signal.
    EXPECT_TRUE(r.exit_code == 1 || (r.exit_code > 100 && r.exit_code < 128)) << r.exit_code << " " << r.err;
    EXPECT_TRUE(has(r.err, row.message)) << "expected '" << row.message << "' in: " << r.err;
  }
}

// A scratch copy of a fixture checkpoint, removed at the end of the test.
class FixtureCopy {
 public:
  explicit FixtureCopy(const std::string& fixture, const std::string& name = "ckpt") {
    dir_ = fs::temp_directory_path() / ("kvdice_hcli_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_.parent_path());
    fs::copy(fixture, dir_, fs::copy_options::recursive);
  }
  ~FixtureCopy() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }
  std::string str() const { return dir_.string(); }
  Json json(const std::string& file) const { return read_json_file(dir_ / file); }
  void write(const std::string& file, const std::string& text) const {
    fs::remove(dir_ / file);
    std::ofstream(dir_ / file) << text;
  }

 private:
  fs::path dir_;
};

TEST(HardeningCli, ProbeSynthRefusesBadArmsCellsAndFillers) {
  const std::string filler = std::string(KVDICE_SOURCE_DIR) + "/configs/synth/filler.txt";
  const std::vector<std::string> base = {"probe", "synth", "--model", kModel, "-T", "128", "-r", "32", "-n", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_all_fail({
      {with({"--filler", filler, "--arms", "random_pp;bogus"}), "unknown or malformed arm 'bogus'"},
      {with({"--filler", filler, "--arms", "pin:heads=two"}), "'pin:heads=two'"},
      {with({"--filler", filler, "--cells", "b300"}), "unknown cell 'b300'"},
      {with({"--filler", filler, "--cells", "a9000"}), "longer than the longest context"},
      {with({"--filler", "/nonexistent/filler.txt", "--cells", "a200"}), "--filler /nonexistent/filler.txt: no such file"},
      {with({"--cells", "a200"}), "--filler is required"},
      {with({"--filler", filler, "--confidence", "1.5"}), "--confidence"},
      {with({"--filler", filler, "--instances", "0"}), "--instances"},
  });
}

TEST(HardeningCli, IntegerAndNumberFlagsAreBoundedNotNarrowed) {
  const std::vector<std::string> g = {"generate", "--model", kModel, "-p", "hi"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = g;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_all_fail({
      {with({"--threads", "100000"}), "--threads"},  // segfaulted inside OpenMP
      {with({"--threads", "-1"}), "--threads"},
      {with({"--seed", "-1"}), "--seed"},  // CLI11 alone wraps it to 2^64 - 1
      {with({"--seed", "0x10"}), "not a decimal integer"},
      {with({"--budget", "4294967296", "--window", "8"}), "--budget"},
      {with({"--budget", "1e3"}), "not a decimal integer"},
      {with({"--window", "0", "--budget", "32"}), "--window"},
      {with({"--max-new-tokens", "0"}), "--max-new-tokens"},
      {with({"--max-new-tokens", "99999999999"}), "--max-new-tokens"},
      {with({"--samples", "0"}), "--samples"},
      {with({"--top-k", "-1", "--temperature", "1"}), "--top-k"},
      {with({"--temperature", "nan"}), "not a finite decimal number"},
      {with({"--temperature", "inf"}), "not a finite decimal number"},
      {with({"--temperature", "1e39"}), "--temperature: 1e+39 is above 100"},  // overflowed a float
      {with({"--temperature", "-1"}), "--temperature"},
      {with({"--temperature", "1e-30"}), "dividing logits by it overflows"},
      {with({"--top-p", "nan", "--temperature", "1"}), "--top-p"},
      {with({"--top-p", "1.5", "--temperature", "1"}), "--top-p"},
      {{"probe", "passcode", "--model", kModel, "--rounds", "2000000000"}, "--rounds"},
      {{"probe", "passcode", "--model", kModel, "--rounds", "100000", "--window", "1000", "--budget", "2000"},
       "teacher-forced tokens"},
      {{"probe", "passcode", "--model", kModel, "--digits", "13"}, "--digits"},
      {{"probe", "passcode", "--model", kModel, "--instances", "0"}, "--instances"},
      {{"probe", "passcode", "--model", kModel, "--threads", "100000"}, "--threads"},
  });
  // A leading zero is decimal, not octal: 024 is 24 (a multiple of 8), not 20.
  const CommandResult r = run_kvdice(with({"-T", "024", "-r", "8", "-n", "2", "--json", "--ignore-eos"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["budget"], 24);
}

TEST(HardeningCli, IgnoredOrMeaninglessFlagsAreRefused) {
  const std::vector<std::string> g = {"generate", "--model", kModel, "-p", "hi", "--policy", "full"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = g;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_all_fail({
      {with({"--chat-template", "chatml"}), "--chat-template only applies with --chat"},
      {with({"--system", "be brief"}), "--system only applies with --chat"},
      {with({"--no-think"}), "--no-think only applies with --chat"},
      {with({"--budget", "32"}), "--budget has no effect with --policy full"},
      {with({"--window", "8"}), "--window has no effect with --policy full"},
      {with({"--retention-log", "/tmp/x.jsonl"}), "--retention-log has nothing to log"},
      {with({"--top-p", "0.9"}), "--top-p has no effect with greedy decoding"},
      {with({"--top-k", "5"}), "--top-k has no effect with greedy decoding"},
      {{"generate", "--model", kChatmlModel, "-p", "hi", "--policy", "full", "--chat", "--no-think"},
       "the chatml chat template has no thinking switch"},
      {{"probe", "passcode", "--model", kChatmlModel, "--no-think", "--rounds", "1", "--instances", "1",
        "--budget", "32", "--window", "8"},
       "the chatml chat template has no thinking switch"},
      {{"generate", "--model", kModel, "-p", "hi", "--long-prompt", "maybe"}, "--long-prompt"},
  });
  // The same flags where they do apply still run.
  const CommandResult ok = run_kvdice({"generate", "--model", kModel, "-p", "hi", "--policy", "full",
                                       "--chat", "--no-think", "--system", "be brief", "-n", "2", "--json"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(HardeningCli, UnknownSubcommandsAreNamed) {
  expect_all_fail({
      {{"genrate", "--model", kModel}, "unknown subcommand 'genrate' for 'kvdice'"},
      {{"probe", "passcodes"}, "unknown subcommand 'passcodes' for 'probe'"},
  });
  // Control bytes on the command line are escaped in the message.
  const CommandResult r = run_kvdice({std::string("bad\x1b[2Jname")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "bad\\x1b[2Jname")) << r.err;
}

TEST(HardeningCli, SpecialFilesInPlaceOfCheckpointMembersAreRefused) {
  for (const char* member : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                             "generation_config.json"}) {
    SCOPED_TRACE(member);
    FixtureCopy copy(kModel, std::string("fifo_") + member);
    fs::remove(copy.dir() / member);
    ASSERT_EQ(::mkfifo((copy.dir() / member).c_str(), 0600), 0);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"generate", "--model", copy.str(), "-p", "hi", "--policy", "full", "-n",
                                   "1"},
          std::vector<std::string>{"inspect", "--check", "--model", copy.str()}}) {
      const CommandResult r = run_kvdice(args, {}, "", 60);  // hung for ever before the fix
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_TRUE(has(r.err, member) && has(r.err, "is a FIFO, expected a regular file")) << r.err;
    }
  }
  // A device as a model member, a directory as a prompt file, a FIFO named like a GGUF.
  FixtureCopy copy(kModel, "device");
  fs::remove(copy.dir() / "tokenizer.json");
  fs::create_symlink("/dev/zero", copy.dir() / "tokenizer.json");
  const fs::path gguf_fifo = copy.dir() / "model.gguf";
  ASSERT_EQ(::mkfifo(gguf_fifo.c_str(), 0600), 0);
  expect_all_fail({
      {{"inspect", "--check", "--model", copy.str()}, "is a character device, expected a regular file"},
      {{"generate", "--model", kModel, "--prompt-file", copy.str(), "--policy", "full"}, "is a directory"},
      {{"inspect", "--model", gguf_fifo.string()}, "neither an HF checkpoint directory nor a .gguf file"},
  });
}

TEST(HardeningCli, OutputLostOnAFullDeviceIsAnError) {
  const std::vector<std::string> gen = {"generate", "--model", kModel, "-p", "hi",
                                        "--policy", "full",    "-n",   "40", "--ignore-eos"};
  struct Case {
    std::vector<std::string> args;
    std::string stdout_path;
  };
  std::vector<std::string> gen_json = gen;
  gen_json.push_back("--json");
  std::vector<std::string> gen_log = {
      "generate", "--model", kModel, "-p", "hi",           "--budget",        "16",
      "--window", "8",       "-n",   "40", "--ignore-eos", "--retention-log", "/dev/full"};
  const std::vector<Case> cases = {
      {gen, "/dev/full"},                                        // streamed text
      {gen_json, "/dev/full"},                                   // one JSON record
      {{"inspect", "--model", kModel, "--json"}, "/dev/full"},   // a short JSON document
      {{"inspect", "--model", kModel, "--check"}, "/dev/full"},  // one report
      {{"pull", "--list"}, "/dev/full"},
      {gen_log, ""},  // the retention log
      {{"probe", "passcode", "--model", kModel, "--rounds", "1", "--instances", "1", "--budget", "32",
        "--window", "8", "--policies", "full", "--json-out", "/dev/full"},
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.args.back());
    const CommandResult r = run_kvdice(c.args, {}, c.stdout_path);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(has(r.err, "No space left on device")) << r.err;
  }
}

TEST(HardeningCli, JsonOutputsAreWrittenWhole) {
  const fs::path out =
      fs::temp_directory_path() / ("kvdice_hcli_probe_" + std::to_string(::getpid()) + ".json");
  const CommandResult r =
      run_kvdice({"probe", "passcode", "--model", kModel, "--rounds", "1", "--instances", "1", "--budget",
                  "32", "--window", "8", "--policies", "full", "--json-out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = read_json_file(out);
  EXPECT_EQ(j["results"].size(), 1u);
  // No temporary is left beside it.
  for (const auto& entry : fs::directory_iterator(out.parent_path()))
    EXPECT_FALSE(has(entry.path().filename().string(), out.filename().string() + ".tmp")) << entry.path();
  fs::remove(out);
}

TEST(HardeningCli, NonUtf8PathsPrintSafely) {
  FixtureCopy copy(kModel,
                   "bad\xff\xfe"
                   "name");
  const CommandResult r = run_kvdice({"inspect", "--model", copy.str(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;  // threw a JSON library exception before
  const Json j = Json::parse(r.out);
  EXPECT_TRUE(has(j["path"].get<std::string>(), "bad\xef\xbf\xbd\xef\xbf\xbdname")) << j["path"];
  const CommandResult text = run_kvdice({"inspect", "--model", copy.str()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(has(text.out, "bad\\xff\\xfename")) << text.out;
  const CommandResult missing =
      run_kvdice({"inspect", "--model", std::string("/nonexistent/\x1b[31mred\x07")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(has(missing.err, "/nonexistent/\\x1b[31mred\\x07")) << missing.err;
}

// Each broken checkpoint: `inspect` (no --check) still describes it, while `inspect --check` and `generate`
// both refuse it with the same message.
TEST(HardeningCli, InspectCheckRefusesWhatGenerateRefuses) {
  struct Variant {
    std::string name;
    std::function<void(const FixtureCopy&)> corrupt;
    std::string message;
  };
  auto edit_config = [](const char* file, std::function<void(Json&)> f) {
    return [file, f](const FixtureCopy& c) {
      Json j = c.json(file);
      f(j);
      c.write(file, j.dump());
    };
  };
  const std::vector<Variant> variants = {
      {"too_many_layers",
       edit_config("config.json",
                   [](Json& j) { j["num_hidden_layers"] = j["num_hidden_layers"].get<int>() + 1; }),
       "missing tensor 'model.layers."},
      {"wrong_shape",
       edit_config("config.json",
                   [](Json& j) { j["intermediate_size"] = j["intermediate_size"].get<int>() + 2; }),
       "has shape"},
      {"broken_tokenizer", edit_config("tokenizer.json", [](Json& j) { j["model"]["type"] = "WordPiece"; }),
       "only byte-level 'BPE' is supported"},
      {"stop_id_outside_vocab",
       edit_config("generation_config.json", [](Json& j) { j["eos_token_id"] = 1 << 20; }),
       "outside the model's vocabulary"},
      {"small_vocab", edit_config("config.json", [](Json& j) { j["vocab_size"] = 100; }), "has shape"},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    FixtureCopy copy(kModel, "check_" + v.name);
    v.corrupt(copy);
    const CommandResult check = run_kvdice({"inspect", "--check", "--model", copy.str()});
    EXPECT_EQ(check.exit_code, 1) << check.out;
    EXPECT_TRUE(has(check.err, v.message)) << check.err;
    const CommandResult gen =
        run_kvdice({"generate", "--model", copy.str(), "-p", "hi", "--policy", "full", "-n", "1"});
    EXPECT_EQ(gen.exit_code, 1) << gen.out;
    EXPECT_TRUE(has(gen.err, v.message)) << gen.err;
  }
  // The GGUF fixture holds only part of a model (it tests name mapping): plain inspect describes it,
  // --check and generate both refuse it the same way.
  const std::string partial_gguf = kFixtures + "/gguf/tiny_qwen2.gguf";
  EXPECT_EQ(run_kvdice({"inspect", "--model", partial_gguf}).exit_code, 0);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", "--check", "--model", partial_gguf},
        std::vector<std::string>{"generate", "--model", partial_gguf, "-p", "hi", "--policy", "full", "-n",
                                 "1"}}) {
    const CommandResult r = run_kvdice(args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(has(r.err, "missing tensor 'model.layers.0.input_layernorm.weight'")) << r.err;
  }
  // A good checkpoint passes, naming what was checked.
  const CommandResult ok = run_kvdice({"inspect", "--check", "--model", kModel, "--json"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const Json j = Json::parse(ok.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["chat_template"], "qwen3");
  EXPECT_GT(j["tensors_checked"].get<int>(), 5);
}

// Second round: the flag mechanism reaches every subcommand. Each row was silently replaced, wrapped,
// aborted or crashed before; each must now exit non-zero naming the flag, before any model loads.
TEST(HardeningCli, EverySubcommandChecksItsNumericFlags) {
  const std::string results = (fs::temp_directory_path() / ("kvdice_hcli_flags_" + std::to_string(::getpid()))).string();
  const std::vector<std::string> run = {"eval",      "run",   "--model",   kModel,  "--task", "math500",
                                        "--dataset", kFixtures + "/eval/arithmetic.jsonl", "--results", results};
  auto eval_run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::vector<std::string> stats = {"stats", "--results", results};
  const std::string shape = kModel + "/config.json";
  const std::vector<std::string> bench = {"bench", "throughput", "--random-weights", "--config", shape,
                                          "--backend", "cpu", "--quick"};
  auto bench_with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = bench;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_all_fail({
      {eval_run({"--runs", "0"}), "--runs: 0 is outside"},  // ran 2 (the task's)
      {eval_run({"--runs", "2000000000"}), "--runs"},
      {eval_run({"-T", "-8"}), "--budget: -8 is outside"},  // ran 1024
      {eval_run({"--window", "0"}), "--window"},
      {eval_run({"--temperature", "nan"}), "--temperature: 'nan' is not a finite"},  // ran 0.6
      {eval_run({"--temperature", "1e-45"}), "dividing logits by it overflows"},     // aborted in the sampler
      {eval_run({"--temperature", "-0.5"}), "--temperature"},
      {eval_run({"--top-p", "0"}), "--top-p"},
      {eval_run({"--max-new-tokens", "0"}), "--max-new-tokens"},  // meant "no cap"
      {eval_run({"--seed", "-1"}), "--seed"},                     // wrapped to 2^64 - 1
      {eval_run({"--threads", "100000"}), "--threads"},           // segfaulted
      {eval_run({"--max-batch", "0"}), "--max-batch"},
      {eval_run({"--limit", "-1"}), "--limit"},
      {eval_run({"--long-prompt", "maybe"}), "--long-prompt"},
      {{"eval", "grade", "--results", results, "--test-timeout", "nan"}, "--test-timeout"},
      {{"eval", "grade", "--results", results, "--symbolic-timeout", "-1"}, "--symbolic-timeout"},
      {{"eval", "export", "--results", results, "--format", "xml"}, "--format"},
      {{"stats", "--results", results, "--resamples", "2000000000"}, "--resamples"},  // allocated 16 GB
      {{"stats", "--results", results, "--resamples", "0"}, "--resamples"},
      {{"stats", "--results", results, "--seed", "-1"}, "--seed"},
      {{"stats", "--results", results, "--format", "html"}, "--format"},
      {bench_with({"--temperature", "1e-45"}), "dividing logits by it overflows"},  // aborted in the sampler
      {bench_with({"--top-p", "nan"}), "--top-p"},
      {bench_with({"--threads", "100000"}), "--threads"},
      {bench_with({"--batches", "1,0"}), "--batches"},
      {bench_with({"--bandwidth-mib", "100000000"}), "--bandwidth-mib"},
      {{"bench", "capacity", "--random-weights", "--config", shape, "--backend", "cpu", "--memory-gib", "100000"},
       "is more than the"},  // allocated until the machine ran out
      {{"bench", "capacity", "--random-weights", "--config", shape, "--backend", "cpu", "--memory-gib", "nan"},
       "--memory-gib"},
      {{"bench", "thruput", "--random-weights", "--config", shape}, "thruput"},
      {{"calibrate", "-m", kModel, "--text", shape, "--out", results + "/x", "--threads", "5000"}, "--threads"},
      {{"calibrate", "-m", kModel, "--text", shape, "--out", results + "/x", "--tokens", "0"}, "--tokens"},
      {{"calibrate", "--random-weights", "--out", results + "/x"}, "--random-weights needs --config"},
      {{"calibrate", "--random-weights", "--config", shape, "-m", kModel, "--out", results + "/x"}, "not both"},
      {{"calibrate", "--random-weights", "--config", shape, "--text", shape, "--out", results + "/x"}, "drop --text"},
      {{"calibrate", "-m", kModel, "--out", results + "/x"}, "--text FILE is required"},
      {{"calibrate", "-m", kModel, "--text", shape, "--seed", "3", "--out", results + "/x"}, "add --random-weights"},
      {{"calibrate", "--out", results + "/x"}, "needs --model M --text FILE, or --random-weights"},
      {{"probe", "passcode", "--model", kModel, "--temperature", "1"}, "--temperature"},  // no such flag
  });
  fs::remove_all(results);
}

// Everything the probe can check is checked before it loads the model, builds filler or runs a policy.
TEST(HardeningCli, ProbeRefusesBeforeItWorks) {
  expect_all_fail({
      // Ran `full` to the end before refusing `bogus`.
      {{"probe", "passcode", "--model", kModel, "--policies", "full,bogus", "--rounds", "1", "--instances", "1",
        "--budget", "32", "--window", "8"},
       "--policies: unknown eviction policy 'bogus'"},  // the probe's own flag, not generate's --policy
      {{"probe", "passcode", "--model", kModel, "--policies", "random_pp:nonsense=1"}, "nonsense"},
      // At its largest --rounds built minutes of filler before the engine refused a full-attention
      // request longer than the model's context.
      {{"probe", "passcode", "--model", kModel, "--policies", "random_pp,full", "--rounds", "200000", "--window",
        "64", "--budget", "128"},
       "policy full keeps every token"},
      // An output place that cannot be written failed only after the whole probe had run; now before the
      // model loads (a model that is not there is not what the error names).
      {{"probe", "passcode", "--model", kFixtures + "/no-such-model", "--json-out", "/no-such-dir/p.json"},
       "cannot write /no-such-dir/p.json"},
      {{"probe", "synth", "--model", kFixtures + "/no-such-model", "--filler", kModel + "/config.json", "--csv-out",
        "/no-such-dir/s.csv"},
       "cannot write /no-such-dir/s.csv"},
  });
}

// calibrate's --out replaced whatever file was there once the calibration ended (as root, /etc/passwd
// too), and a place it could not write failed only then. Now: statistics are replaced (a calibration
// run again), any other file is refused untouched, and the place is checked before the model loads.
TEST(HardeningCli, CalibrateReplacesOnlyStatistics) {
  const fs::path dir = fs::temp_directory_path() / ("kvdice_hcli_calibrate_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string text = (dir / "text.txt").string(), notes = (dir / "notes.txt").string(),
                    stats = (dir / "q3.stats").string();
  {
    std::ofstream out(text);
    for (int i = 0; i < 60; ++i) out << "the cat sat on the mat and counted to " << i << ". ";
    std::ofstream(notes) << "mine";
  }
  auto calibrate = [&](const std::string& model, const std::string& out) {
    return std::vector<std::string>{"calibrate", "--model", model,   "--text",    text, "--out",
                                    out,         "--tokens", "64",   "--segment", "32"};
  };
  expect_all_fail({
      {calibrate(kModel, notes), "not overwriting it"},
      {calibrate(kModel, dir.string()), "is a directory"},
      // Before the model loads: a model that is not there is not what the error names.
      {calibrate(kFixtures + "/no-such-model", (dir / "missing" / "x.stats").string()), "cannot write"},
      {calibrate(kFixtures + "/no-such-model", notes), "not overwriting it"},
  });
  EXPECT_EQ(read_regular_file(notes, 1 << 10), "mine");
  for (int run = 0; run < 2; ++run) {  // the second replaces the first's statistics
    const CommandResult r = run_kvdice(calibrate(kModel, stats));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  for (const auto& entry : fs::directory_iterator(dir))  // no temporary left beside them
    EXPECT_FALSE(has(entry.path().filename().string(), ".tmp")) << entry.path();
  fs::remove_all(dir);
}

// Inputs of bounded size, refused by name when they are not files, and never silently merged.
TEST(HardeningCli, EvalInputsAreBoundedAndConsistent) {
  const fs::path dir = fs::temp_directory_path() / ("kvdice_hcli_eval_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "empty_db");
  std::ofstream(dir / "empty_db" / "results.sqlite").close();  // 0 bytes
  {
    std::ofstream dup(dir / "dup.jsonl");
    dup << "{\"question\": \"1+1?\", \"answer\": \"2\"}\n";
    dup << "{\"question\": \"2+2?\", \"answer\": \"4\", \"answer\": \"5\"}\n";
  }
  auto run = [&](const std::string& dataset, const std::string& results) {
    return std::vector<std::string>{"eval", "run", "--model", kModel, "--task", "math500", "--dataset", dataset,
                                    "--results", results, "--policy", "full", "--max-new-tokens", "2",
                                    "--limit", "1", "--runs", "1", "-q"};
  };
  auto cell = [&](const std::string& name) {
    auto args = run(kFixtures + "/eval/arithmetic.jsonl", (dir / "r3").string());
    args.insert(args.end(), {"--cell", name});
    return args;
  };
  expect_all_fail({
      {run("/dev/zero", (dir / "r1").string()), "/dev/zero is a character device"},  // read without limit
      {run((dir / "dup.jsonl").string(), (dir / "r2").string()), "dup.jsonl:2: duplicate key 'answer'"},
      {run(kFixtures + "/eval/arithmetic.jsonl", (dir / "empty_db").string()), "is empty (0 bytes)"},
      {{"stats", "--results", (dir / "empty_db").string()}, "is empty (0 bytes)"},
      {{"eval", "check", "--results", (dir / "empty_db").string()}, "is empty (0 bytes)"},
      // An empty name fell back to the default cell without a word; a control character made one unprintable.
      {cell(""), "a cell name must not be empty"},
      {cell("a\nb"), "must not contain control characters"},
  });
  EXPECT_FALSE(fs::exists(dir / "r3"));  // refused before any work
  EXPECT_EQ(fs::file_size(dir / "empty_db" / "results.sqlite"), 0u);  // left as it was
  fs::remove_all(dir);
}

// stats and eval export wrote through unchecked streams: /dev/full lost the table and exited 0.
TEST(HardeningCli, StatsAndExportOutputLostIsAnError) {
  const fs::path dir = fs::temp_directory_path() / ("kvdice_hcli_out_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string results = (dir / "res").string();
  const CommandResult made =
      run_kvdice({"eval", "run", "--model", kModel, "--task", "math500", "--dataset",
                  kFixtures + "/eval/arithmetic.jsonl", "--results", results, "--cell", "full", "--policy", "full",
                  "--max-new-tokens", "2", "--limit", "2", "--runs", "1", "--threads", "1", "-q"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_EQ(run_kvdice({"eval", "grade", "--results", results}).exit_code, 0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"stats", "--results", results, "--out", "/dev/full"}, ""},
      {{"stats", "--results", results, "--per-problem", "/dev/full"}, "/dev/null"},
      {{"stats", "--results", results}, "/dev/full"},
      {{"eval", "export", "--results", results, "--out", "/dev/full"}, ""},
      {{"eval", "export", "--results", results}, "/dev/full"},
  };
  for (const auto& [args, stdout_path] : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    SCOPED_TRACE(joined);
    const CommandResult r = run_kvdice(args, {}, stdout_path, 60);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(has(r.err, "No space left on device") || has(r.err, "writing output failed")) << r.err;
  }
  // A regular file is still written whole.
  const CommandResult ok = run_kvdice({"stats", "--results", results, "--out", (dir / "t.md").string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(has(read_regular_file(dir / "t.md", 1 << 20), "| full |"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvdice::testing
