// drift_bench_engine: batch-b decode through Engine::submit, as a server's requests run, with overlapped
// scheduling on and off. b requests of `prompt` random token ids each generate `gen` tokens (ignore_eos);
// decode tok/s counts the tokens after each request's first over the time from the last first token to the
// last request's end, so prefill is left out; so are the step phases (plan, launch, device wait, apply)
// per decode step, which show where the host's time goes: with overlap on, plan and launch run while the
// device works.
//
//   drift_bench_engine -m MODEL_DIR [--random-weights] [--tokenizer DIR] --device cuda --batch 1 64
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "drift/engine.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  drift::EngineConfig engine;
  std::vector<int32_t> batches{1, 16, 64};
  int32_t prompt = 512, gen = 128, repeats = 2;
  std::vector<std::string> overlap{"off", "on"};
};

struct Row {
  double decode_tok_s = 0;
  double steps = 0, overlapped = 0;
  drift::StepPhaseSeconds phases;
};

// One batch on a warm engine: the decode rate and the step phases it added.
Row run_batch(drift::Engine& engine, int32_t batch, const Options& o, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(10, 30000);
  std::mutex mu;
  std::condition_variable done;
  int32_t finished = 0, firsts = 0;
  Clock::time_point last_first, last_end;
  drift::EngineMetrics before;  // once every request has its first token: the decode steps' start
  for (int32_t i = 0; i < batch; ++i) {
    drift::Request r;
    for (int32_t j = 0; j < o.prompt; ++j) r.prompt_tokens.push_back(token(rng));
    r.max_tokens = o.gen;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    bool first = true;
    auto submitted = engine.submit(r, [&, first](const drift::Output& out) mutable {
      std::lock_guard lock(mu);
      if (first && !out.new_tokens.empty()) {
        first = false;
        last_first = Clock::now();
        // Called on the engine thread between steps, so the snapshot splits prefill from decode.
        if (++firsts == batch) before = engine.metrics();
      }
      if (out.finished) {
        ++finished;
        last_end = Clock::now();
        done.notify_all();
      }
    });
    if (!submitted.ok()) {
      std::fprintf(stderr, "submit: %s\n", submitted.status().to_string().c_str());
      std::exit(1);
    }
  }
  std::unique_lock lock(mu);
  done.wait(lock, [&] { return finished == batch; });
  const drift::EngineMetrics after = engine.metrics();
  Row row;
  row.decode_tok_s = double(batch) * (o.gen - 1) / std::chrono::duration<double>(last_end - last_first).count();
  row.steps = double(after.steps_total - before.steps_total);
  row.overlapped = double(after.overlapped_steps_total - before.overlapped_steps_total);
  row.phases.plan = after.step_seconds.plan - before.step_seconds.plan;
  row.phases.launch = after.step_seconds.launch - before.step_seconds.launch;
  row.phases.device = after.step_seconds.device - before.step_seconds.device;
  row.phases.apply = after.step_seconds.apply - before.step_seconds.apply;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Decode through the Engine, with overlapped scheduling on and off"};
  app.add_option("-m,--model", o.engine.model_dir, "model folder")->required();
  app.add_option("--tokenizer", o.engine.tokenizer_dir, "tokenizer folder (default: the model's)");
  app.add_flag("--random-weights", o.engine.random_weights, "weights drawn from a seed (config.json alone)");
  app.add_option("--device", o.engine.device, "cpu or cuda");
  app.add_option("--batch", o.batches, "concurrent requests");
  app.add_option("--prompt", o.prompt, "prompt tokens per request");
  app.add_option("--gen", o.gen, "tokens generated per request");
  app.add_option("--repeats", o.repeats, "batches per row (the best is kept; the first warms the graphs)");
  app.add_option("--overlap", o.overlap, "overlapped scheduling: off, on or both")->check(CLI::IsMember({"off", "on"}));
  CLI11_PARSE(app, argc, argv);
  o.engine.max_model_len = o.prompt + o.gen + 16;
  o.engine.kv_cache_memory_fraction = 0.5;
  std::printf("| batch | overlap | decode tok/s | ms/step | steps overlapped | plan | launch | device wait | apply |"
              "\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& overlap : o.overlap) {
    drift::EngineConfig config = o.engine;
    config.overlap_scheduling = overlap == "on";
    config.max_num_seqs = std::max(64, *std::max_element(o.batches.begin(), o.batches.end()));
    config.max_num_batched_tokens = std::max(2048, o.prompt);
    auto engine = drift::Engine::create(config);
    if (!engine.ok()) {
      std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
      return 1;
    }
    for (int32_t batch : o.batches) {
      Row best;
      for (int32_t r = 0; r < o.repeats; ++r) {
        const Row row = run_batch(**engine, batch, o, uint32_t(batch * 100 + r));
        if (row.decode_tok_s > best.decode_tok_s) best = row;
      }
      const double per_step_us = 1e6 / std::max(best.steps, 1.0);
      std::printf("| %d | %s | %.1f | %.3f | %.0f%% | %.1f us | %.1f us | %.1f us | %.1f us |\n", batch, overlap.c_str(),
                  best.decode_tok_s, 1e3 * batch / best.decode_tok_s, 100.0 * best.overlapped / std::max(best.steps, 1.0),
                  best.phases.plan * per_step_us, best.phases.launch * per_step_us, best.phases.device * per_step_us,
                  best.phases.apply * per_step_us);
      std::fflush(stdout);
    }
  }
  return 0;
}
