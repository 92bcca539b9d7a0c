// drift: the command-line entry point. Each subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Drift: an inference engine for large language models.\n"
               "Run `drift <command> --help` for the options of each command."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every command");
  drift::cli::add_generate_command(app);
  drift::cli::add_inspect_command(app);
  drift::cli::add_perplexity_command(app);
  drift::cli::add_extra_commands(app);
  CLI11_PARSE(app, argc, argv);
  return drift::cli::exit_code();
}
