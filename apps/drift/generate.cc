// drift generate: one prompt streamed to stdout, or a file of prompts run concurrently through the engine.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "load_progress.h"

namespace drift::cli {

namespace {

struct GenerateOptions {
  EngineConfig engine;
  std::string prompt;
  std::string batch_file;
  std::string output = "text";
  Request request;
};

// Collects one request's stream and signals when it finishes.
struct Collected {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;
  std::string text;
  Output last;
  bool done = false;
};

nlohmann::ordered_json to_json(const Collected& c) {
  nlohmann::ordered_json j;
  j["prompt_token_ids"] = c.prompt_tokens;
  j["generated_token_ids"] = c.tokens;
  j["text"] = c.text;
  j["finish_reason"] = finish_reason_name(c.last.finish_reason);
  if (c.last.finish_reason == FinishReason::kError) j["error"] = c.last.error.to_string();
  j["usage"] = {{"prompt_tokens", c.last.usage.prompt_tokens},
                {"completion_tokens", c.last.usage.completion_tokens},
                {"cached_tokens", c.last.usage.cached_tokens}};
  j["timings"] = {{"time_to_first_token_s", c.last.timings.time_to_first_token_s}, {"e2e_s", c.last.timings.e2e_s}};
  return j;
}

// How speculation did, when it ran: drafts accepted and tokens per verify step.
void print_speculation(const EngineMetrics& m) {
  if (m.spec_decode_num_drafts == 0) return;
  const double drafted = double(std::max<int64_t>(m.spec_decode_num_draft_tokens, 1));
  std::fprintf(stderr, "drift: speculative: %ld verify steps, %ld of %ld drafts accepted (%.0f%%), %.2f tokens per step\n",
               long(m.spec_decode_num_drafts), long(m.spec_decode_num_accepted_tokens),
               long(m.spec_decode_num_draft_tokens), 100.0 * double(m.spec_decode_num_accepted_tokens) / drafted,
               1.0 + double(m.spec_decode_num_accepted_tokens) / double(m.spec_decode_num_drafts));
  if (m.spec_decode_num_partial_verifies + m.spec_decode_num_full_verifies > 0)
    std::fprintf(stderr, "drift: specpv: %ld partial and %ld full verify steps\n", long(m.spec_decode_num_partial_verifies),
                 long(m.spec_decode_num_full_verifies));
}

// Where the steps' time went (EngineMetrics::step_seconds): on a GPU, plan + launch + apply is host work
// (on the CPU backend, launch is the forward itself), which overlapped steps run while the device works.
void print_step_phases(const EngineMetrics& m) {
  if (m.steps_total == 0) return;
  const StepPhaseSeconds& p = m.step_seconds;
  const double per = 1e3 / double(m.steps_total);
  std::fprintf(stderr, "drift: %ld steps (%ld overlapped), ms per step: plan %.3f, launch %.3f, device %.3f, apply %.3f\n",
               long(m.steps_total), long(m.overlapped_steps_total), p.plan * per, p.launch * per, p.device * per,
               p.apply * per);
}

void run_generate(GenerateOptions& o) {
  if (run_as_follower(o.engine)) return;
  std::vector<std::string> prompts;
  if (!o.batch_file.empty()) {
    std::ifstream in(o.batch_file);
    if (!in) return fail("cannot read --batch-file " + o.batch_file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
    if (prompts.empty()) return fail("--batch-file " + o.batch_file + " holds no prompts");
  } else {
    if (o.prompt.empty()) return fail("give --prompt TEXT or --batch-file FILE");
    prompts.push_back(o.prompt);
  }
  o.engine.max_num_seqs = std::max<int32_t>(o.engine.max_num_seqs, 1);
  LoadProgress progress(o.engine.model_dir);
  o.engine.load_progress = progress.callback();
  auto engine = Engine::create(o.engine);
  progress.finish();
  if (!engine.ok()) return fail(engine.status().to_string());

  const bool stream = prompts.size() == 1 && o.output == "text";
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Collected> results(prompts.size());
  size_t num_done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r = o.request;
    r.prompt = prompts[i];
    auto id = (*engine)->submit(std::move(r), [&, i](const Output& out) {
      std::lock_guard lock(mu);
      Collected& c = results[i];
      c.tokens.insert(c.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
      c.text += out.text;
      if (stream) {
        std::fputs(out.text.c_str(), stdout);
        std::fflush(stdout);
      }
      if (out.finished) {
        c.last = out;
        c.done = true;
        ++num_done;
        cv.notify_all();
      }
    });
    if (!id.ok()) {
      std::lock_guard lock(mu);
      results[i].last.finish_reason = FinishReason::kError;
      results[i].last.error = id.status();
      results[i].done = true;
      ++num_done;
    }
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return num_done == prompts.size(); });
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t total_tokens = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    Collected& c = results[i];
    c.prompt_tokens = c.last.prompt_tokens;
    total_tokens += c.tokens.size();
    if (c.last.finish_reason == FinishReason::kError) fail("prompt " + std::to_string(i + 1) + ": " + c.last.error.to_string());
    if (o.output == "json") {
      std::printf("%s\n", to_json(c).dump().c_str());
    } else if (!stream) {
      std::printf("[%zu] %s%s\n", i + 1, prompts[i].c_str(), c.text.c_str());
    }
  }
  if (stream) std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "drift: %zu tokens in %.2f s (%.1f tokens/s) over %zu request%s\n", total_tokens, seconds,
               total_tokens / std::max(seconds, 1e-9), prompts.size(), prompts.size() == 1 ? "" : "s");
  const EngineMetrics metrics = (*engine)->metrics();
  print_speculation(metrics);
  print_step_phases(metrics);
  (*engine)->shutdown();
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Continue a prompt (greedy unless --temperature > 0)");
  add_engine_options(*cmd, o->engine);
  cmd->add_option("-p,--prompt", o->prompt, "Text to continue");
  cmd->add_option("--batch-file", o->batch_file, "File with one prompt per line, run concurrently; outputs in order");
  cmd->add_option("-n,--max-tokens", o->request.max_tokens, "Tokens to generate (at least 1)")
      ->check(at_least(1))->capture_default_str();
  o->request.sampling.temperature = 0.0f;
  add_sampling_options(*cmd, o->request.sampling);
  cmd->add_option("--stop", o->request.stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", o->request.ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_option("--output", o->output, "text: stream the continuation; json: one JSON object per prompt")
      ->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace drift::cli
