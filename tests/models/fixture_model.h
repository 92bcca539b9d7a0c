// Loads a fixture model and its goldens (tests/fixtures/models/<name>/golden.{json,safetensors}).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "model/model.h"
#include "runner/model_runner.h"

namespace drift::testing {

struct GoldenPrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
  std::vector<double> greedy_margin;
  // MoE fixtures: per prompt token, the smallest gap between a chosen and an unchosen router score over the
  // layers (transformers' fp32 forward); empty for dense models.
  std::vector<double> router_margin;
  std::vector<float> logits;  // [ids.size(), vocab]
};

struct FixtureModel {
  std::string dir;
  std::unique_ptr<backend::Ops> ops;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<runner::ModelRunner> runner;
  std::vector<GoldenPrompt> prompts;
};

std::string fixture_dir(const std::string& name);
// Loads the model on the CPU backend with a runner of `num_blocks` blocks of `block_size` tokens, its KV
// cache in `kv_dtype` (unset: the compute dtype, fp32).
FixtureModel load_fixture(const std::string& name, int32_t block_size = 16, int32_t num_blocks = 64,
                          std::optional<DType> kv_dtype = std::nullopt);
// The same from a folder holding a fixture's files (a copy of one, changed by a test).
FixtureModel load_fixture_dir(const std::string& dir, int32_t block_size = 16, int32_t num_blocks = 64,
                              std::optional<DType> kv_dtype = std::nullopt);
// A runner of one KV group for tests: num_blocks blocks of block_size tokens, steps of up to max_tokens
// tokens and 4 sequences, sequences of up to max_model_len tokens.
runner::RunnerConfig small_runner_config(int32_t block_size, int32_t num_blocks, int32_t max_tokens,
                                         int32_t max_model_len = 128);
// Rows [first, first + n) of a [rows, width] tensor on `ops`, as fp32 on the host (an fp32 backend's).
std::vector<float> read_rows(backend::Ops& ops, const Tensor& src, int64_t first, int64_t n);
// max |a - b| / max |b| over the two arrays.
double relative_max_error(const float* a, const float* b, size_t n);

}  // namespace drift::testing
