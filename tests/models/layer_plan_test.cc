// The shared layer plan: what each layer is, read from the config for every family (GPT-OSS's alternating
// windows and MoE everywhere, DeepSeek's dense first layers then MoE over MLA, Qwen's windows from
// max_window_layers), the KV groups that follow from it, and the backend check that refuses a model a
// backend cannot run before any weight is read, naming the layer and the reason.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/ops.h"
#include "model/layer_plan.h"
#include "model/registry.h"
#include "weights/model_config.h"
#ifdef DRIFT_TEST_CUDA_SUPPORT
#include "backend/cuda/cuda_ops.h"
#endif

namespace drift::testing {
namespace {

using model::AttentionKind;
using model::FeedForwardKind;

weights::ModelConfig fixture_config(const std::string& name) {
  auto c = weights::load_model_config(std::string(DRIFT_FIXTURES_DIR) + "/models/" + name);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : weights::ModelConfig{};
}

TEST(LayerPlan, GptOssAlternatesWindowsWithExpertsEverywhere) {
  const model::LayerPlan plan = model::plan_layers(fixture_config("gpt_oss"));
  ASSERT_EQ(plan.layers.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.layers[i].attention, AttentionKind::kGqa);
    EXPECT_EQ(plan.layers[i].feed_forward, FeedForwardKind::kMoe);
    EXPECT_EQ(plan.layers[i].sliding_window, i % 2 == 0 ? 8 : 0) << i;
    EXPECT_EQ(plan.layers[i].kv_group, i % 2 == 0 ? 0 : 1) << i;
  }
  ASSERT_EQ(plan.kv_groups.size(), 2u);
  EXPECT_EQ(plan.kv_groups[0].name, "sliding");
  EXPECT_EQ(plan.kv_groups[0].num_layers, 2);
  EXPECT_EQ(plan.kv_groups[1].name, "full");
}

TEST(LayerPlan, DeepseekHasDenseFirstLayersThenExpertsOverMla) {
  const model::LayerPlan plan = model::plan_layers(fixture_config("deepseek_v2"));
  ASSERT_EQ(plan.layers.size(), 3u);
  EXPECT_EQ(plan.layers[0].feed_forward, FeedForwardKind::kDense);
  EXPECT_EQ(plan.layers[1].feed_forward, FeedForwardKind::kMoe);
  EXPECT_EQ(plan.layers[2].feed_forward, FeedForwardKind::kMoe);
  for (const auto& layer : plan.layers) EXPECT_EQ(layer.attention, AttentionKind::kMla);
  ASSERT_EQ(plan.kv_groups.size(), 1u);
  EXPECT_EQ(plan.kv_groups[0].kind, core::KvKind::kMlaLatent);
  const auto specs = plan.kv_specs(DType::kBF16);
  EXPECT_EQ(specs[0].dtype, DType::kBF16);
  EXPECT_EQ(specs[0].num_layers, 3);
}

TEST(LayerPlan, QwenSlidesFromMaxWindowLayers) {
  nlohmann::json c = {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"vocab_size", 64},
                      {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 4},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 128},
                      {"use_sliding_window", true}, {"sliding_window", 16}, {"max_window_layers", 2}};
  auto config = weights::parse_model_config(c.dump(), "", "inline/config.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const model::LayerPlan plan = model::plan_layers(*config);
  ASSERT_EQ(plan.layers.size(), 4u);
  EXPECT_EQ(plan.layers[0].sliding_window, 0);
  EXPECT_EQ(plan.layers[1].sliding_window, 0);
  EXPECT_EQ(plan.layers[2].sliding_window, 16);
  EXPECT_EQ(plan.layers[3].sliding_window, 16);
  ASSERT_EQ(plan.kv_groups.size(), 2u);
  EXPECT_EQ(plan.kv_groups[0].name, "full");
  EXPECT_EQ(plan.kv_groups[1].name, "sliding");
}

TEST(BackendCheck, RefusesAKvDtypeTheBackendCannotStoreBeforeLoading) {
  auto ops = backend::make_cpu_ops();
  model::LoadOptions load;
  load.kv_dtype = DType::kF16;  // the CPU stores F32, BF16 and F8_E4M3 KV, not F16
  auto m = model::load_model(std::string(DRIFT_FIXTURES_DIR) + "/models/deepseek_v2", *ops, load);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported) << m.status().to_string();
  EXPECT_NE(m.status().message().find("DeepseekV2ForCausalLM cannot run on the cpu backend: layer 0 (attention)"),
            std::string::npos)
      << m.status().message();
  for (DType ok : {DType::kBF16, DType::kF8E4M3}) {
    load.kv_dtype = ok;
    EXPECT_TRUE(model::load_model(std::string(DRIFT_FIXTURES_DIR) + "/models/deepseek_v2", *ops, load).ok());
  }
}

TEST(BackendCheck, AttentionShapesOfEachKind) {
  const weights::ModelConfig mla = fixture_config("deepseek_v2");
  const backend::AttentionShape s = model::attention_shape(mla, model::plan_layers(mla).layers[0], DType::kBF16);
  EXPECT_TRUE(s.shared_kv);
  EXPECT_EQ(s.num_kv_heads, 1);
  EXPECT_EQ(s.head_dim, mla.mla->kv_lora_rank + mla.mla->qk_rope_head_dim);
  EXPECT_EQ(s.head_dim_v, mla.mla->kv_lora_rank);
  const weights::ModelConfig oss = fixture_config("gpt_oss");
  const backend::AttentionShape g = model::attention_shape(oss, model::plan_layers(oss).layers[0], DType::kBF16);
  EXPECT_FALSE(g.shared_kv);
  EXPECT_TRUE(g.sinks);
  EXPECT_EQ(g.sliding_window, 8);
}

#ifdef DRIFT_TEST_CUDA_SUPPORT
// The CUDA backend's answers depend on its kernels, not on a GPU: checked here on any machine.
TEST(BackendCheck, CudaNamesWhatItLacks) {
  for (const char* name : {"deepseek_v2", "deepseek_v3", "youtu"}) {  // multi-head latent attention
    const weights::ModelConfig mla = fixture_config(name);
    const auto shape = model::attention_shape(mla, model::plan_layers(mla).layers[0], DType::kBF16);
    const Status latent = backend::CudaOps::check_attention(shape);
    EXPECT_TRUE(latent.ok()) << name << ": " << latent.message();
    auto odd = shape;
    odd.head_dim = 42;
    const Status refused = backend::CudaOps::check_attention(odd);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_NE(refused.message().find("latent attention"), std::string::npos) << refused.message();
  }
  EXPECT_TRUE(backend::CudaOps::check_moe({.hidden = 64, .ffn = 32, .num_experts = 8, .top_k = 2}).ok());  // bf16 experts
  const Status moe = backend::CudaOps::check_moe({.hidden = 64, .ffn = 1407, .num_experts = 8, .top_k = 2});
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(moe.message().find("bf16 experts"), std::string::npos) << moe.message();
  const weights::ModelConfig llama = fixture_config("llama");
  const auto gqa = model::attention_shape(llama, model::plan_layers(llama).layers[0], DType::kBF16);
  EXPECT_TRUE(backend::CudaOps::check_attention(gqa).ok());
  auto f32_kv = gqa;
  f32_kv.kv_dtype = DType::kF32;
  EXPECT_FALSE(backend::CudaOps::check_attention(f32_kv).ok());
  // FP8 KV: GQA layers and the latent (MLA) kernels run on it; DSA-lite's sparse attention refuses it by name.
  auto fp8_kv = gqa;
  fp8_kv.kv_dtype = DType::kF8E4M3;
  EXPECT_TRUE(backend::CudaOps::check_attention(fp8_kv).ok());
  const weights::ModelConfig v2 = fixture_config("deepseek_v2");
  auto fp8_latent = model::attention_shape(v2, model::plan_layers(v2).layers[0], DType::kF8E4M3);
  const Status fp8_mla = backend::CudaOps::check_attention(fp8_latent);
  EXPECT_TRUE(fp8_mla.ok()) << fp8_mla.message();
  auto fp8_sparse = fp8_kv;
  fp8_sparse.sparse_top_k = 64;
  fp8_sparse.index_heads = 4;
  fp8_sparse.index_dim = 32;
  const Status no_fp8_dsa = backend::CudaOps::check_attention(fp8_sparse);
  ASSERT_FALSE(no_fp8_dsa.ok());
  EXPECT_NE(no_fp8_dsa.message().find("DSA-lite"), std::string::npos) << no_fp8_dsa.message();
  EXPECT_NE(no_fp8_dsa.message().find("BF16"), std::string::npos) << no_fp8_dsa.message();
  auto wide = gqa;
  wide.head_dim = wide.head_dim_v = 256;
  const Status too_wide = backend::CudaOps::check_attention(wide);
  ASSERT_FALSE(too_wide.ok());
  EXPECT_NE(too_wide.message().find("head_dim 256"), std::string::npos) << too_wide.message();
}
#endif

}  // namespace
}  // namespace drift::testing
