// Retrofit files made in C++ from a model folder's own weights, for tests (tools/retrofit/ makes the
// trained ones): MLA-lite with the latent = [K without its RoPE features; V] of every KV head, so that at
// full rank the retrofit is the model exactly, or that latent cut to its first `rank` features; DSA-lite
// with indexer weights drawn from a seed; optionally a drawn query adapter and kept K rows moved off k_proj's
// (what training leaves), so that the latent is exact but the queries and positional keys are not the model's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drift/status.h"

namespace drift::testing {

struct RetrofitRecipe {
  bool mla_lite = true;
  int64_t rank = 0;                  // d_c; 0: full rank. The latent is K's features, then V's: a rank at
                                     // or under G x nope keeps no V (every attention output 0)
  std::vector<int32_t> rope_freqs;   // empty: every frequency of the model's RoPE
  int64_t q_rank = 0;                // a query adapter of this rank, drawn from `seed` (0: none)
  bool own_k_rope = false;           // kept K rows of the file's own: k_proj's, each scaled by a draw
  bool shared_rope = false;          // ... one set for every KV head (KV head 0's rows, scaled): a shared RoPE key
  bool dsa_lite = false;
  int64_t index_heads = 2, index_dim = 8;
  int32_t top_k = 16, sink_tokens = 1, local_window = 4;
  int32_t index_rope = 0;            // indexer features rotated by position (0: none)
  uint64_t seed = 1;
};

// Writes the retrofit for the model in `model_dir` to `path` (F32 tensors).
Status write_test_retrofit(const std::string& model_dir, const std::string& path, const RetrofitRecipe& recipe);

}  // namespace drift::testing
