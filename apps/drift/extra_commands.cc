// The commands added after the first release: serve, bench serve and chat.
#include "commands.h"

namespace drift::cli {

void add_extra_commands(CLI::App& app) {
  add_serve_command(app);
  add_bench_serve_command(app);
  add_chat_command(app);
}

}  // namespace drift::cli
