// The commands added after the first release: serve and bench serve.
#include "commands.h"

namespace drift::cli {

void add_extra_commands(CLI::App& app) {
  add_serve_command(app);
  add_bench_serve_command(app);
}

}  // namespace drift::cli
