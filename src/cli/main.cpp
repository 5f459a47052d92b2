// kvdice: one binary, one subcommand per file in src/cli/.
#include <fmt/core.h>

#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kvdice: LLM decoding under a bounded KV-cache budget (Random Attention and baselines)"};
  app.require_subcommand(1);
  kvdice::cli::add_generate_command(app);
  kvdice::cli::add_inspect_command(app);
  kvdice::cli::add_pull_command(app);
  kvdice::cli::add_probe_command(app);
  kvdice::cli::add_eval_command(app);
  kvdice::cli::add_stats_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvdice::Error& e) {
    fmt::print(stderr, "kvdice: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvdice: unexpected error: {}\n", e.what());
    return 2;
  }
  return 0;
}
