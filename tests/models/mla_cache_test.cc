// MLA keeps one latent entry per token per layer: kv_lora_rank + qk_rope_head_dim values, nothing else.
// The model reports that through kv_specs, and a layer's cache, after a step, holds exactly
// [rms_norm(latent) | rope(k_rope)] of each token at its slot, recomputed here on the host from the raw
// checkpoint tensors of the Youtu fixture (plain RoPE, half-split rotation).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture_model.h"
#include "model/layers/mla_attention.h"
#include "model/layers/rope.h"
#include "weights/model_config.h"
#include "weights/weight_store.h"

namespace drift::testing {
namespace {

TEST(MlaCache, KvSpecsCountTheLatentOnly) {
  struct Want {
    const char* fixture;
    int32_t latent_dim, layers;
  };
  for (const Want& w : {Want{"deepseek_v2", 32 + 8, 3}, Want{"deepseek_v3", 32 + 8, 3}, Want{"youtu", 32 + 16, 2}}) {
    FixtureModel f = load_fixture(w.fixture);
    ASSERT_TRUE(f.model) << w.fixture;
    const auto specs = f.model->kv_specs(DType::kBF16);
    ASSERT_EQ(specs.size(), 1u) << w.fixture;
    EXPECT_EQ(specs[0].kind, core::KvKind::kMlaLatent) << w.fixture;
    EXPECT_EQ(specs[0].latent_dim, w.latent_dim) << w.fixture;
    EXPECT_EQ(specs[0].num_layers, w.layers) << w.fixture;
    EXPECT_EQ(f.model->kv_bytes_per_token(DType::kBF16), int64_t(w.latent_dim) * w.layers * 2) << w.fixture;
  }
}

// SpecPV's query tap on MLA: every layer hands over its absorbed queries [n, heads, latent + rope] and its
// latent cache [blocks, block_size, 1, latent + rope], so SpecPV's block bounds are over the latent rows
// (one KV head that every query head reads), and they arrive after the step's rows were written.
struct RecordingTap final : model::QueryTap {
  struct Call {
    int32_t kv_group;
    std::vector<int64_t> q, cache;
    float newest_row_norm;  // of the cache row the step's last token wrote
  };
  std::vector<Call> calls;
  int32_t newest_slot = 0;
  void on_queries(int32_t kv_group, const Tensor& q, int64_t q_row_stride, const Tensor& k_cache) override {
    EXPECT_EQ(q_row_stride, 0);
    const int64_t width = k_cache.size(3);
    const float* row = k_cache.data_as<float>() + int64_t(newest_slot) * width;
    float norm = 0.0f;
    for (int64_t i = 0; i < width; ++i) norm += row[i] * row[i];
    calls.push_back({kv_group, {q.size(0), q.size(1), q.size(2)},
                     {k_cache.size(0), k_cache.size(1), k_cache.size(2), k_cache.size(3)}, norm});
  }
};

TEST(MlaCache, QueryTapGetsAbsorbedQueriesAndTheLatentCache) {
  FixtureModel f = load_fixture("deepseek_v2", /*block_size=*/16, /*num_blocks=*/8);
  ASSERT_TRUE(f.model);
  RecordingTap tap;
  tap.newest_slot = 3 * 16 + 11;  // position 11 of the step lands in block 3
  f.runner->set_query_tap(&tap);
  std::vector<int32_t> ids(12);
  for (int32_t i = 0; i < 12; ++i) ids[size_t(i)] = 5 + 7 * i;
  const std::vector<std::vector<int32_t>> tables = {{3}};
  runner::SeqStep step{ids, 0, 12, tables, true};
  ASSERT_TRUE(f.runner->step({&step, 1}).ok());
  const int64_t heads = f.model->config().num_heads, width = 32 + 8;  // kv_lora_rank + qk_rope_head_dim
  ASSERT_EQ(tap.calls.size(), size_t(f.model->config().num_layers));
  for (const RecordingTap::Call& c : tap.calls) {
    EXPECT_EQ(c.kv_group, 0);
    EXPECT_EQ(c.q, (std::vector<int64_t>{12, heads, width}));
    EXPECT_EQ(c.cache, (std::vector<int64_t>{8 + 1, 16, 1, width}));  // the pool and the runner's scratch block
    EXPECT_GT(c.newest_row_norm, 0.0f);
  }
}

std::vector<float> host_tensor(const weights::WeightStore& store, const std::string& name) {
  auto t = store.get(name);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  std::vector<float> v(static_cast<size_t>((*t)->numel()));
  convert_to_f32((*t)->bytes.data(), (*t)->dtype, v.data(), v.size());
  return v;
}

backend::Buffer device_i32(backend::Ops& ops, const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = ops.alloc(DType::kI32, shape);
  ops.copy_from_host(b.view, v.data());
  return b;
}

TEST(MlaCache, HoldsNormedLatentAndRotatedRopeKeyPerToken) {
  const std::string dir = fixture_dir("youtu");
  auto config = weights::load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ASSERT_FALSE(config->rope.interleaved);  // the fixture exercises the half-split rotation
  auto store = weights::WeightStore::open(dir);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto ops = backend::make_cpu_ops();
  model::WeightLoader loader = model::WeightLoader::from_store(*store, *ops);

  const int64_t hidden = config->hidden_size, l = config->mla->kv_lora_rank, r = config->mla->qk_rope_head_dim;
  const int64_t max_pos = config->max_position_embeddings;
  auto freqs = model::rope_frequencies(config->rope, r, max_pos);
  ASSERT_TRUE(freqs.ok());
  const std::vector<float> table = model::rope_cos_sin_table(*freqs, max_pos);
  backend::Buffer rope_table = ops->alloc(DType::kF32, {max_pos, r});
  ops->copy_from_host(rope_table.view, table.data());
  const model::MlaSpec spec = model::mla_spec(*config, {rope_table.view, int32_t(r), false});
  auto layer = model::MlaAttention::load(loader, "model.layers.0.self_attn", spec);
  ASSERT_TRUE(layer.ok()) << layer.status().to_string();

  // Five tokens of one sequence in blocks {2, 0} of 4 slots each.
  const int32_t num_blocks = 3, block_size = 4, n = 5;
  layer->allocate_cache(*ops, num_blocks, block_size);
  const Tensor& cache = layer->cache().values.view;
  ASSERT_EQ(cache.ndim, 4);
  EXPECT_EQ(cache.numel(), int64_t(num_blocks) * block_size * (l + r)) << "the cache holds L + R values per slot";
  std::fill_n(cache.data_as<float>(), cache.numel(), 0.0f);

  const std::vector<int32_t> blocks = {2, 0}, positions = {0, 1, 2, 3, 4};
  std::vector<int32_t> slots;
  for (int32_t p : positions) slots.push_back(blocks[size_t(p / block_size)] * block_size + p % block_size);
  backend::Buffer b_positions = device_i32(*ops, positions, {n}), b_slots = device_i32(*ops, slots, {n});
  backend::Buffer b_tables = device_i32(*ops, blocks, {1, 2}), b_start = device_i32(*ops, {0, n}, {2});
  backend::Buffer b_lens = device_i32(*ops, {n}, {1});
  model::ForwardContext ctx;
  ctx.num_tokens = n;
  ctx.num_seqs = 1;
  ctx.positions = b_positions.view;
  ctx.kv_groups.push_back({b_slots.view, b_tables.view});
  ctx.query_start = b_start.view;
  ctx.context_lens = b_lens.view;

  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n * hidden));
  for (float& v : x) v = normal(rng);
  backend::Buffer b_x = ops->alloc(DType::kF32, {n, hidden}), b_out = ops->alloc(DType::kF32, {n, hidden});
  ops->copy_from_host(b_x.view, x.data());
  model::MlaScratch scratch = model::MlaScratch::allocate(*ops, n, spec);
  layer->forward(*ops, ctx, b_x.view, scratch, b_out.view);

  const auto kv_a = host_tensor(*store, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");  // [L + R, hidden]
  const auto norm = host_tensor(*store, "model.layers.0.self_attn.kv_a_layernorm.weight");      // [L]
  const double theta = config->rope.theta;
  for (int32_t t = 0; t < n; ++t) {
    std::vector<double> row(static_cast<size_t>(l + r), 0.0);
    for (int64_t o = 0; o < l + r; ++o)
      for (int64_t d = 0; d < hidden; ++d)
        row[size_t(o)] += double(kv_a[size_t(o * hidden + d)]) * x[size_t(t * hidden + d)];
    double sum_sq = 0.0;
    for (int64_t o = 0; o < l; ++o) sum_sq += row[size_t(o)] * row[size_t(o)];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(l) + 1e-6);
    std::vector<double> want(static_cast<size_t>(l + r));
    for (int64_t o = 0; o < l; ++o) want[size_t(o)] = row[size_t(o)] * inv_rms * norm[size_t(o)];
    for (int64_t i = 0; i < r / 2; ++i) {
      const double angle = positions[size_t(t)] * std::pow(theta, -2.0 * double(i) / double(r));
      const double a = row[size_t(l + i)], b = row[size_t(l + i + r / 2)];
      want[size_t(l + i)] = a * std::cos(angle) - b * std::sin(angle);
      want[size_t(l + i + r / 2)] = b * std::cos(angle) + a * std::sin(angle);
    }
    const float* got = cache.data_as<float>() + int64_t(slots[size_t(t)]) * (l + r);
    for (int64_t o = 0; o < l + r; ++o)
      EXPECT_NEAR(got[o], want[size_t(o)], 1e-4 * std::max(1.0, std::fabs(want[size_t(o)])))
          << "token " << t << " value " << o << (o < l ? " (latent)" : " (rope key)");
  }
  // Slots no token was given stay untouched: block 1 entirely, and slots 1..3 of block 0.
  for (int64_t slot : {4, 5, 6, 7, 1, 2, 3})
    for (int64_t o = 0; o < l + r; ++o) ASSERT_EQ(cache.data_as<float>()[slot * (l + r) + o], 0.0f) << "slot " << slot;
}

}  // namespace
}  // namespace drift::testing
