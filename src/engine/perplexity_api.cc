#include <chrono>
#include <cmath>

#include "drift/perplexity.h"
#include "engine/backend_factory.h"
#include "engine/engine_impl.h"
#include "model/registry.h"
#include "runner/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace drift {

double PerplexityResult::perplexity() const { return std::exp(nll / double(std::max<int64_t>(num_scored, 1))); }

double PerplexityResult::bits_per_byte() const { return nll / std::log(2.0) / double(std::max<int64_t>(num_bytes, 1)); }

Expected<PerplexityResult> measure_perplexity(const PerplexityConfig& config, const std::string& text) {
  if (text.empty()) return invalid_argument("the text to score is empty");
  DRIFT_ASSIGN_OR_RETURN(engine::Backend backend, engine::make_backend(config.device));
  backend::Ops& ops = *backend.ops;
  DRIFT_ASSIGN_OR_RETURN(const DType kv_dtype, engine::parse_kv_cache_dtype(config.kv_cache_dtype, ops.compute_dtype()));
  model::LoadOptions load;
  load.progress = config.load_progress;
  load.kv_dtype = kv_dtype;
  load.retrofit_file = config.retrofit_file;
  DRIFT_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::load_model(config.model_dir, ops, load));
  DRIFT_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(config.model_dir + "/tokenizer.json"));

  const weights::ModelConfig& mc = model->config();
  std::vector<int32_t> ids;
  if (mc.bos_token_id) ids.push_back(*mc.bos_token_id);
  const std::vector<int32_t> body = tok.encode(text, false);
  ids.insert(ids.end(), body.begin(), body.end());
  PerplexityResult r;
  r.context = std::min<int64_t>(config.context, mc.max_position_embeddings);
  r.stride = config.stride > 0 ? config.stride : r.context / 2;
  r.num_tokens = int64_t(ids.size());
  r.num_bytes = int64_t(text.size());

  runner::RunnerConfig rc;
  rc.max_num_tokens = int32_t(r.context);
  rc.max_num_seqs = 1;
  rc.max_model_len = int32_t(r.context);
  // One window at a time: every group holds the whole window, in the same block ids (runner/perplexity.cc).
  rc.num_blocks.assign(model->kv_specs(kv_dtype).size(), int32_t((r.context + rc.block_size - 1) / rc.block_size));
  rc.kv_dtype = kv_dtype;
  runner::ModelRunner runner(*model, ops, rc);
  const auto start = std::chrono::steady_clock::now();
  DRIFT_ASSIGN_OR_RETURN(const runner::WindowScore score, runner::sliding_window_nll(runner, ids, r.context, r.stride));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.nll = score.nll;
  r.num_scored = score.num_scored;
  return r;
}

}  // namespace drift
