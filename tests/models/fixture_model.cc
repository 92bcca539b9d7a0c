#include "fixture_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/registry.h"
#include "weights/safetensors.h"

namespace drift::testing {

std::string fixture_dir(const std::string& name) { return std::string(DRIFT_FIXTURES_DIR) + "/models/" + name; }

FixtureModel load_fixture(const std::string& name, int32_t block_size, int32_t num_blocks,
                          std::optional<DType> kv_dtype) {
  return load_fixture_dir(fixture_dir(name), block_size, num_blocks, kv_dtype);
}

FixtureModel load_fixture_dir(const std::string& dir, int32_t block_size, int32_t num_blocks,
                              std::optional<DType> kv_dtype) {
  FixtureModel f;
  f.dir = dir;
  f.ops = backend::make_cpu_ops();
  model::LoadOptions load;
  load.kv_dtype = kv_dtype;
  auto model = model::load_model(f.dir, *f.ops, load);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return f;
  f.model = std::move(model).value();
  runner::RunnerConfig rc;
  rc.block_size = block_size;
  rc.kv_dtype = kv_dtype;
  rc.num_blocks.assign(f.model->kv_specs(DType::kBF16).size(), num_blocks);
  rc.max_num_tokens = 512;
  rc.max_num_seqs = 64;
  rc.max_model_len = int32_t(f.model->config().max_position_embeddings);
  f.runner = std::make_unique<runner::ModelRunner>(*f.model, *f.ops, rc);

  std::ifstream in(f.dir + "/golden.json");
  const auto golden = nlohmann::json::parse(in);
  auto logits_file = weights::SafetensorsFile::open(f.dir + "/golden.safetensors");
  EXPECT_TRUE(logits_file.ok()) << logits_file.status().to_string();
  for (size_t i = 0; i < golden["prompts"].size(); ++i) {
    const auto& p = golden["prompts"][i];
    GoldenPrompt g;
    g.ids = p["ids"].get<std::vector<int32_t>>();
    g.greedy = p["greedy"].get<std::vector<int32_t>>();
    g.greedy_margin = p["greedy_top2_margin"].get<std::vector<double>>();
    if (p.contains("router_token_margin")) g.router_margin = p["router_token_margin"].get<std::vector<double>>();
    EXPECT_TRUE(g.router_margin.empty() || g.router_margin.size() == g.ids.size()) << dir << " prompt " << i;
    const weights::TensorInfo* t = logits_file->find("logits." + std::to_string(i));
    EXPECT_NE(t, nullptr);
    g.logits.resize(size_t(t->numel()));
    convert_to_f32(t->bytes.data(), t->dtype, g.logits.data(), g.logits.size());
    f.prompts.push_back(std::move(g));
  }
  return f;
}

runner::RunnerConfig small_runner_config(int32_t block_size, int32_t num_blocks, int32_t max_tokens,
                                         int32_t max_model_len) {
  runner::RunnerConfig rc;
  rc.block_size = block_size;
  rc.num_blocks = {num_blocks};
  rc.max_num_tokens = max_tokens;
  rc.max_num_seqs = 4;
  rc.max_model_len = max_model_len;
  return rc;
}

std::vector<float> read_rows(backend::Ops& ops, const Tensor& src, int64_t first, int64_t n) {
  std::vector<float> rows(size_t(n * src.size(-1)));
  ops.copy_to_host(rows.data(), src.slice(first, first + n));
  return rows;
}

double relative_max_error(const float* a, const float* b, size_t n) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::fabs(double(a[i]) - double(b[i])));
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

}  // namespace drift::testing
