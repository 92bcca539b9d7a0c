// The subcommands of `drift`. Each add_* registers its options and a callback on the app.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "drift/engine.h"

namespace drift::cli {

void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_bench_serve_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
// Commands added by later features (serve, bench, chat) register here.
void add_extra_commands(CLI::App& app);

// A numeric option's lower bound. CLI11's PositiveNumber and NonNegativeNumber name their upper bound,
// the largest double, in 309 digits.
CLI::Validator at_least(double min);

// Engine options shared by generate, chat, serve, bench and perplexity.
void add_engine_options(CLI::App& cmd, EngineConfig& config);
// A node of rank > 0 (--node-rank) runs node 0's steps (Engine::follow) instead of the command: true when
// it did, the group's outcome reported.
bool run_as_follower(const EngineConfig& config);
// How tokens are drawn (generate, chat): --temperature and the filters and penalties after it, with
// the defaults `sampling` holds.
void add_sampling_options(CLI::App& cmd, SamplingParams& sampling);
std::string default_model_dir();

// The process exit code: 0 unless a command failed.
int exit_code();
void fail(const std::string& message);

}  // namespace drift::cli
