// drift: the command-line entry point. Each subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "commands.h"
#include "logging.h"

namespace {

// CLI11 answers an unknown command with "A subcommand is required"; name it and list the real ones.
bool check_command_name(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--log-level" || arg == "--log-format") {
      ++i;
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->check_name(arg)) return true;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    std::fprintf(stderr, "drift: unknown command '%s'; the commands are %s (drift --help)\n", arg.c_str(), names.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  drift::cli::init_logging();
  CLI::App app{"Drift: an inference engine for large language models.\n"
               "Run `drift <command> --help` for the options of each command."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every command");
  drift::cli::add_logging_options(app);
  drift::cli::add_generate_command(app);
  drift::cli::add_inspect_command(app);
  drift::cli::add_perplexity_command(app);
  drift::cli::add_extra_commands(app);
  if (!check_command_name(app, argc, argv)) return 1;
  CLI11_PARSE(app, argc, argv);
  return drift::cli::exit_code();
}
