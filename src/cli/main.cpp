// kvdice: one binary, one subcommand per file in src/cli/.
#include <fmt/core.h>

#include <exception>
#include <new>
#include <system_error>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"

namespace {

// CLI11 reports a stray word as "not expected"; name it as the unknown subcommand it usually is.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& e) {
  std::string message = e.what();
  const CLI::App* leaf = &app;
  while (true) {
    const auto chosen = leaf->get_subcommands();
    if (chosen.empty()) break;
    leaf = chosen.front();
  }
  const auto extras = leaf->remaining();
  const auto choices = leaf->get_subcommands({});
  if (!choices.empty() && leaf->get_subcommands().empty() && !extras.empty() && extras.front()[0] != '-') {
    std::string names;
    for (const CLI::App* sub : choices) names += (names.empty() ? "" : ", ") + sub->get_name();
    message = fmt::format("unknown subcommand '{}' for '{}' (expected one of: {})", extras.front(),
                          leaf->get_name().empty() ? "kvdice" : leaf->get_name(), names);
  }
  return kvdice::quote_for_message(message);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvdice: LLM decoding under a bounded KV-cache budget (Random Attention and baselines)"};
  app.name("kvdice");
  app.require_subcommand(1);
  kvdice::cli::add_generate_command(app);
  kvdice::cli::add_inspect_command(app);
  kvdice::cli::add_pull_command(app);
  kvdice::cli::add_probe_command(app);
  kvdice::cli::add_serve_command(app);
  kvdice::cli::add_eval_command(app);
  kvdice::cli::add_stats_command(app);
  kvdice::cli::add_calibrate_command(app);
  kvdice::cli::add_bench_command(app);
  kvdice::cli::add_data_command(app);
  kvdice::cli::add_analyze_command(app);
  try {
    app.parse(argc, argv);
    // Output that never reached its destination (stdout on a full disk) is a failure, not a success.
    kvdice::flush_stdout();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "kvdice: error: {}\nRun with --help for more information.\n",
               describe_parse_error(app, e));
    return e.get_exit_code() != 0 ? e.get_exit_code() : 1;
  } catch (const kvdice::Error& e) {
    fmt::print(stderr, "kvdice: error: {}\n", e.what());
    return 1;
  } catch (const std::system_error& e) {  // fmt::print reports a failed write this way
    fmt::print(stderr, "kvdice: error: writing output failed: {}\n", kvdice::quote_for_message(e.what()));
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "kvdice: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvdice: unexpected error: {}\n", kvdice::quote_for_message(e.what()));
    return 2;
  }
  return 0;
}
