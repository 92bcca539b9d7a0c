// drift perplexity: per-token perplexity and bits per byte of a model over a text file, by sliding
// windows (the definition in tools/train/eval_bpb.py, so the two agree on the same model and file).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "engine/engine_impl.h"
#include "load_progress.h"
#include "model/registry.h"
#include "runner/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace drift::cli {

namespace {

struct PerplexityOptions {
  std::string model_dir = default_model_dir();
  std::string file;
  std::string device = "cpu";
  int64_t context = 512;
  int64_t stride = 0;  // 0: context / 2
};

void run_perplexity(const PerplexityOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) return fail("cannot read --file " + o.file);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  if (text.empty()) return fail("--file " + o.file + " is empty");

  auto ops = engine::make_backend(o.device);
  if (!ops.ok()) return fail(ops.status().to_string());
  LoadProgress progress(o.model_dir);
  model::LoadOptions load;
  load.progress = progress.callback();
  auto model = model::load_model(o.model_dir, **ops, load);
  progress.finish();
  if (!model.ok()) return fail(model.status().to_string());
  auto tok = tokenizer::Tokenizer::from_file(o.model_dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status().to_string());

  const auto& config = (*model)->config();
  std::vector<int32_t> ids;
  if (config.bos_token_id) ids.push_back(*config.bos_token_id);
  const std::vector<int32_t> body = tok->encode(text, false);
  ids.insert(ids.end(), body.begin(), body.end());
  const int64_t context = std::min<int64_t>(o.context, config.max_position_embeddings);
  const int64_t stride = o.stride > 0 ? o.stride : context / 2;

  runner::RunnerConfig rc;
  rc.max_num_tokens = int32_t(context);
  rc.max_num_seqs = 1;
  rc.max_model_len = int32_t(context);
  rc.num_blocks = int32_t((context + rc.block_size - 1) / rc.block_size);
  rc.num_kv_groups = int32_t((*model)->kv_specs((*ops)->compute_dtype()).size());
  runner::ModelRunner runner(**model, **ops, rc);
  const auto start = std::chrono::steady_clock::now();
  auto score = runner::sliding_window_nll(runner, ids, context, stride);
  if (!score.ok()) return fail(score.status().to_string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bpb = score->nll / std::log(2.0) / double(text.size());
  std::printf("file           %s (%zu bytes, %zu tokens with BOS)\n", o.file.c_str(), text.size(), ids.size());
  std::printf("windows        context %ld, stride %ld\n", long(context), long(stride));
  std::printf("nll            %.6f nats over %ld tokens\n", score->nll, long(score->num_scored));
  std::printf("perplexity     %.4f per token\n", std::exp(score->nll / double(std::max<int64_t>(score->num_scored, 1))));
  std::printf("bits per byte  %.6f\n", bpb);
  std::fprintf(stderr, "drift: scored %ld tokens in %.2f s (%.0f tokens/s)\n", long(score->num_scored), seconds,
               double(score->num_scored) / std::max(seconds, 1e-9));
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity and bits per byte of a model over a text file");
  cmd->add_option("-m,--model", o->model_dir, "Hugging Face model folder")->capture_default_str();
  cmd->add_option("-f,--file", o->file, "UTF-8 text file")->required();
  cmd->add_option("--context", o->context, "Tokens per window")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  cmd->add_option("--stride", o->stride, "Tokens a window advances (default: context / 2)");
  cmd->add_option("--device", o->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace drift::cli
