// drift perplexity: per-token perplexity and bits per byte of a model over a text file, by sliding
// windows (the definition in tools/train/eval_bpb.py, so the two agree on the same model and file).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "drift/perplexity.h"
#include "load_progress.h"

namespace drift::cli {

namespace {

struct PerplexityOptions {
  PerplexityConfig config;
  std::string file;
};

void run_perplexity(PerplexityOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) return fail("cannot read --file " + o.file);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  if (text.empty()) return fail("--file " + o.file + " is empty");
  LoadProgress progress(o.config.model_dir);
  o.config.load_progress = progress.callback();
  auto result = measure_perplexity(o.config, text);
  progress.finish();
  if (!result.ok()) return fail(result.status().to_string());
  const PerplexityResult& r = *result;
  std::printf("file           %s (%zu bytes, %ld tokens with BOS)\n", o.file.c_str(), text.size(), long(r.num_tokens));
  std::printf("windows        context %ld, stride %ld\n", long(r.context), long(r.stride));
  std::printf("nll            %.6f nats over %ld tokens\n", r.nll, long(r.num_scored));
  std::printf("perplexity     %.4f per token\n", r.perplexity());
  std::printf("bits per byte  %.6f\n", r.bits_per_byte());
  std::fprintf(stderr, "drift: scored %ld tokens in %.2f s (%.0f tokens/s)\n", long(r.num_scored), r.seconds,
               double(r.num_scored) / std::max(r.seconds, 1e-9));
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  o->config.model_dir = default_model_dir();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity and bits per byte of a model over a text file");
  cmd->add_option("-m,--model", o->config.model_dir, "Hugging Face model folder")->capture_default_str();
  cmd->add_option("-f,--file", o->file, "UTF-8 text file")->required();
  cmd->add_option("--context", o->config.context, "Tokens per window")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  cmd->add_option("--stride", o->config.stride, "Tokens a window advances (default: context / 2)");
  cmd->add_option("--device", o->config.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--kv-cache-dtype", o->config.kv_cache_dtype, "KV cache dtype: auto, bf16, f32 or fp8")
      ->check(CLI::IsMember({"auto", "bf16", "f32", "fp8"}))->capture_default_str();
  cmd->add_option("--retrofit", o->config.retrofit_file,
                  "Retrofit weights (safetensors from tools/retrofit/): score the model with them");
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace drift::cli
