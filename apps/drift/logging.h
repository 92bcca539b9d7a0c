// Where drift's log lines go: stderr (stdout carries generated text and JSON), at a level, as text or as
// one JSON object per line for log collectors (`--log-format json`).
#pragma once

#include <CLI/CLI.hpp>

#include "server/access_log.h"

namespace drift::cli {

// Sends spdlog's default logger to stderr as text at info level; the options below change it as they
// are parsed, before any command runs.
void init_logging();
// --log-level and --log-format on the top-level app (accepted after the command too).
void add_logging_options(CLI::App& app);
server::LogFormat log_format();

}  // namespace drift::cli
