// Perplexity and bits per byte of a model over a text, by sliding windows (the definition
// tools/train/eval_bpb.py documents, so the two agree on the same model and file).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "drift/status.h"

namespace drift {

struct PerplexityConfig {
  std::string model_dir;
  std::string device = "cpu";            // "cpu" or "cuda"
  std::string kv_cache_dtype = "auto";   // as EngineConfig::kv_cache_dtype
  std::string retrofit_file;             // as EngineConfig::retrofit_file
  int64_t context = 512;                 // tokens per window (capped by the model's context)
  int64_t stride = 0;                    // tokens a window advances; 0: context / 2
  std::function<void(size_t loaded, size_t total)> load_progress;
};

struct PerplexityResult {
  double nll = 0.0;            // nats over the scored tokens
  int64_t num_scored = 0;      // tokens scored (all but the first)
  int64_t num_tokens = 0;      // tokens of the text, BOS included when the model has one
  int64_t num_bytes = 0;       // of the text
  int64_t context = 0, stride = 0;
  double seconds = 0.0;        // scoring time, loading excluded

  double perplexity() const;   // per token
  double bits_per_byte() const;
};

Expected<PerplexityResult> measure_perplexity(const PerplexityConfig& config, const std::string& text);

}  // namespace drift
