#include "retrofit_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <numeric>
#include <random>

#include "backend/ops.h"
#include "model/layers/mla_lite_attention.h"
#include "model/weight_loader.h"
#include "weights/model_config.h"
#include "weights/safetensors.h"
#include "weights/weight_store.h"

namespace drift::testing {

namespace {

weights::TensorToWrite f32_tensor(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
  std::vector<std::byte> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return {name, DType::kF32, std::move(shape), std::move(bytes)};
}

// The latent of every KV head stacked: rows of K without its RoPE features, then rows of V.
struct LatentBasis {
  std::vector<float> down;  // [full_rank, hidden]
  int64_t full_rank = 0;
};

Expected<LatentBasis> latent_basis(model::WeightLoader& loader, const weights::ModelConfig& c, int64_t layer,
                                   const model::RopeFeatureSplit& split) {
  const int64_t g = c.num_kv_heads, d = c.head_dim, hidden = c.hidden_size;
  const std::string p = fmt::format("model.layers.{}.self_attn.", layer);
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> k, loader.read_host(p + "k_proj.weight", {g * d, hidden}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> v, loader.read_host(p + "v_proj.weight", {g * d, hidden}));
  LatentBasis b;
  for (int64_t head = 0; head < g; ++head)
    for (const int64_t row : split.nope)
      b.down.insert(b.down.end(), k.begin() + (head * d + row) * hidden, k.begin() + (head * d + row + 1) * hidden);
  b.down.insert(b.down.end(), v.begin(), v.end());
  b.full_rank = int64_t(b.down.size()) / hidden;
  return b;
}

// Rows [first, first + rows) of the identity of size full_rank, cut to its first `rank` columns.
std::vector<float> identity_block(int64_t first, int64_t rows, int64_t rank) {
  std::vector<float> m(size_t(rows * rank), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    if (first + r < rank) m[size_t(r * rank + first + r)] = 1.0f;
  return m;
}

std::vector<float> draw_normal(std::mt19937_64& rng, float stddev, int64_t n) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// The query adapter (q_up q_down) and the file's own kept K rows of one layer, as the recipe asks.
Status add_trained_queries(model::WeightLoader& loader, const weights::ModelConfig& c, const RetrofitRecipe& recipe,
                           const model::RopeFeatureSplit& split, int64_t layer, std::mt19937_64& rng,
                           std::vector<weights::TensorToWrite>& out) {
  const int64_t g = c.num_kv_heads, d = c.head_dim, hidden = c.hidden_size, rq = recipe.q_rank;
  if (rq > 0) {
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kMlaLiteQDown),
                             draw_normal(rng, 0.3f, rq * hidden), {rq, hidden}));
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kMlaLiteQUp),
                             draw_normal(rng, 0.1f, c.num_heads * d * rq), {c.num_heads * d, rq}));
  }
  if (!recipe.own_k_rope) return Status::Ok();
  const std::string p = fmt::format("model.layers.{}.self_attn.", layer);
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> k, loader.read_host(p + "k_proj.weight", {g * d, hidden}));
  std::vector<float> rows;
  const int64_t keys = recipe.shared_rope ? 1 : g;
  const std::vector<float> scales = draw_normal(rng, 0.2f, keys * int64_t(split.rope.size()));
  for (int64_t head = 0; head < keys; ++head)
    for (size_t i = 0; i < split.rope.size(); ++i) {
      const float scale = 1.0f + scales[size_t(head) * split.rope.size() + i];
      for (int64_t j = 0; j < hidden; ++j) rows.push_back(scale * k[size_t((head * d + split.rope[i]) * hidden + j)]);
    }
  out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kMlaLiteKRope), rows,
                           {keys * int64_t(split.rope.size()), hidden}));
  return Status::Ok();
}

Status add_mla_lite(model::WeightLoader& loader, const weights::ModelConfig& c, const RetrofitRecipe& recipe,
                    std::vector<weights::TensorToWrite>& out, std::map<std::string, std::string>& meta) {
  model::MlaLiteSpec spec;
  spec.head_dim = c.head_dim;
  spec.rotary_dim = c.rope.rotary_dim;
  spec.interleaved = c.rope.interleaved;
  spec.rope_freqs = recipe.rope_freqs;
  if (spec.rope_freqs.empty()) {
    spec.rope_freqs.resize(size_t(c.rope.rotary_dim / 2));
    std::iota(spec.rope_freqs.begin(), spec.rope_freqs.end(), 0);
  }
  const model::RopeFeatureSplit split = model::rope_feature_split(spec);
  const int64_t g = c.num_kv_heads, nope = int64_t(split.nope.size()), hidden = c.hidden_size;
  std::mt19937_64 rng(recipe.seed + 7);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    DRIFT_ASSIGN_OR_RETURN(LatentBasis b, latent_basis(loader, c, layer, split));
    const int64_t rank = recipe.rank > 0 ? recipe.rank : b.full_rank;
    b.down.resize(size_t(std::min(rank, b.full_rank) * hidden));
    b.down.resize(size_t(rank * hidden), 0.0f);
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kMlaLiteKvDown), b.down, {rank, hidden}));
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kMlaLiteKUp), identity_block(0, g * nope, rank),
                             {g * nope, rank}));
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kMlaLiteVUp),
                             identity_block(g * nope, g * c.head_dim, rank), {g * c.head_dim, rank}));
    DRIFT_RETURN_IF_ERROR(add_trained_queries(loader, c, recipe, split, layer, rng, out));
  }
  meta[weights::kMetaRopeFreqs] = fmt::format("{}", fmt::join(spec.rope_freqs, ","));
  return Status::Ok();
}

void add_dsa_lite(const weights::ModelConfig& c, const RetrofitRecipe& r, std::vector<weights::TensorToWrite>& out,
                  std::map<std::string, std::string>& meta) {
  std::mt19937_64 rng(r.seed);
  const auto draw = [&](int64_t n) { return draw_normal(rng, 0.3f, n); };
  const int64_t hidden = c.hidden_size;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kDsaIndexQ),
                             draw(r.index_heads * r.index_dim * hidden), {r.index_heads * r.index_dim, hidden}));
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kDsaIndexK), draw(r.index_dim * hidden),
                             {r.index_dim, hidden}));
    out.push_back(f32_tensor(weights::retrofit_tensor_name(layer, weights::kDsaIndexW), draw(r.index_heads * hidden),
                             {r.index_heads, hidden}));
  }
  meta[weights::kMetaTopK] = std::to_string(r.top_k);
  meta[weights::kMetaSinkTokens] = std::to_string(r.sink_tokens);
  meta[weights::kMetaLocalWindow] = std::to_string(r.local_window);
  if (r.index_rope > 0) meta[weights::kMetaIndexRope] = std::to_string(r.index_rope);
}

}  // namespace

Status write_test_retrofit(const std::string& model_dir, const std::string& path, const RetrofitRecipe& recipe) {
  DRIFT_ASSIGN_OR_RETURN(weights::ModelConfig c, weights::load_model_config(model_dir));
  DRIFT_ASSIGN_OR_RETURN(weights::WeightStore store, weights::WeightStore::open(model_dir));
  std::unique_ptr<backend::Ops> ops = backend::make_cpu_ops();
  model::WeightLoader loader = model::WeightLoader::from_store(store, *ops);
  std::vector<weights::TensorToWrite> tensors;
  std::map<std::string, std::string> meta{{"format", "pt"}};
  if (recipe.mla_lite) DRIFT_RETURN_IF_ERROR(add_mla_lite(loader, c, recipe, tensors, meta));
  if (recipe.dsa_lite) add_dsa_lite(c, recipe, tensors, meta);
  return weights::write_safetensors(path, tensors, meta);
}

}  // namespace drift::testing
