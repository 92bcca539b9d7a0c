// The two halves of this module checked against each other on every committed fixture: the shapes the
// parsed config implies are the shapes transformers saved. A wrong head_dim, rope width, expert count or
// bias flag in the config parser shows up here as a shape mismatch or a missing tensor.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "weights/model_config.h"
#include "weights/weight_store.h"

namespace drift::weights {
namespace {

std::string fixture(const std::string& model) { return std::string(DRIFT_FIXTURES_DIR) + "/models/" + model; }

class FixtureShapes : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    Expected<ModelConfig> config = load_model_config(fixture(GetParam()));
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    config_ = *config;
    Expected<WeightStore> store = WeightStore::open(fixture(GetParam()));
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_.emplace(std::move(store).value());
  }

  void expect_shape(const std::string& name, std::vector<int64_t> shape) {
    Expected<const TensorInfo*> t = store_->get(name, shape);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
  }
  void expect_absent(const std::string& name) { EXPECT_FALSE(store_->contains(name)) << name; }

  ModelConfig config_;
  std::optional<WeightStore> store_;
};

TEST_P(FixtureShapes, TensorsHaveTheShapesTheConfigImplies) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  expect_shape("model.embed_tokens.weight", {c.vocab_size, hidden});
  expect_shape("model.norm.weight", {hidden});
  if (c.tie_word_embeddings)
    expect_absent("lm_head.weight");
  else
    expect_shape("lm_head.weight", {c.vocab_size, hidden});

  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    expect_shape(p + "input_layernorm.weight", {hidden});
    expect_shape(p + "post_attention_layernorm.weight", {hidden});

    if (c.mla) {
      const MlaConfig& m = *c.mla;
      const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
      if (m.q_lora_rank == 0) {
        expect_shape(p + "self_attn.q_proj.weight", {c.num_heads * qk, hidden});
      } else {
        expect_shape(p + "self_attn.q_a_proj.weight", {m.q_lora_rank, hidden});
        expect_shape(p + "self_attn.q_a_layernorm.weight", {m.q_lora_rank});
        expect_shape(p + "self_attn.q_b_proj.weight", {c.num_heads * qk, m.q_lora_rank});
      }
      expect_shape(p + "self_attn.kv_a_proj_with_mqa.weight", {m.kv_lora_rank + m.qk_rope_head_dim, hidden});
      expect_shape(p + "self_attn.kv_a_layernorm.weight", {m.kv_lora_rank});
      expect_shape(p + "self_attn.kv_b_proj.weight",
                   {c.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank});
      expect_shape(p + "self_attn.o_proj.weight", {hidden, c.num_heads * m.v_head_dim});
    } else {
      const int64_t q_width = c.num_heads * c.head_dim;
      const int64_t kv_width = c.num_kv_heads * c.head_dim;
      expect_shape(p + "self_attn.q_proj.weight", {q_width, hidden});
      expect_shape(p + "self_attn.k_proj.weight", {kv_width, hidden});
      expect_shape(p + "self_attn.v_proj.weight", {kv_width, hidden});
      expect_shape(p + "self_attn.o_proj.weight", {hidden, q_width});
      if (c.attention_bias) {
        expect_shape(p + "self_attn.q_proj.bias", {q_width});
        expect_shape(p + "self_attn.k_proj.bias", {kv_width});
        expect_shape(p + "self_attn.v_proj.bias", {kv_width});
      } else {
        expect_absent(p + "self_attn.q_proj.bias");
      }
      if (c.attention_out_bias)
        expect_shape(p + "self_attn.o_proj.bias", {hidden});
      else
        expect_absent(p + "self_attn.o_proj.bias");
      if (c.qk_norm) {
        expect_shape(p + "self_attn.q_norm.weight", {c.head_dim});
        expect_shape(p + "self_attn.k_norm.weight", {c.head_dim});
      } else {
        expect_absent(p + "self_attn.q_norm.weight");
      }
    }
    if (c.attention_sinks) expect_shape(p + "self_attn.sinks", {c.num_heads});

    const bool moe_layer = c.moe && layer >= c.moe->first_k_dense_replace;
    if (!moe_layer) {
      expect_shape(p + "mlp.gate_proj.weight", {c.intermediate_size, hidden});
      expect_shape(p + "mlp.up_proj.weight", {c.intermediate_size, hidden});
      expect_shape(p + "mlp.down_proj.weight", {hidden, c.intermediate_size});
      if (c.mlp_bias) expect_shape(p + "mlp.down_proj.bias", {hidden});
    } else if (c.quant_method == "mxfp4") {
      // GPT-OSS: experts fused per layer, MXFP4 blocks of 32 values in 16 bytes with one scale byte each.
      const MoeConfig& m = *c.moe;
      const int64_t inter = m.moe_intermediate_size;
      expect_shape(p + "mlp.router.weight", {m.num_experts, hidden});
      expect_shape(p + "mlp.router.bias", {m.num_experts});
      expect_shape(p + "mlp.experts.gate_up_proj_blocks", {m.num_experts, 2 * inter, hidden / 32, 16});
      expect_shape(p + "mlp.experts.gate_up_proj_scales", {m.num_experts, 2 * inter, hidden / 32});
      expect_shape(p + "mlp.experts.gate_up_proj_bias", {m.num_experts, 2 * inter});
      expect_shape(p + "mlp.experts.down_proj_blocks", {m.num_experts, hidden, inter / 32, 16});
      expect_shape(p + "mlp.experts.down_proj_scales", {m.num_experts, hidden, inter / 32});
      expect_shape(p + "mlp.experts.down_proj_bias", {m.num_experts, hidden});
      EXPECT_EQ((*store_->get(p + "mlp.experts.gate_up_proj_blocks"))->dtype, DType::kU8);
    } else {
      const MoeConfig& m = *c.moe;
      const int64_t inter = m.moe_intermediate_size;
      expect_shape(p + "mlp.gate.weight", {m.num_experts, hidden});
      if (m.topk_method == MoeConfig::kNoauxTc) expect_shape(p + "mlp.gate.e_score_correction_bias", {m.num_experts});
      for (int64_t e = 0; e < m.num_experts; ++e) {
        const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
        expect_shape(ep + "gate_proj.weight", {inter, hidden});
        expect_shape(ep + "up_proj.weight", {inter, hidden});
        expect_shape(ep + "down_proj.weight", {hidden, inter});
      }
      if (m.num_shared_experts > 0) {
        const int64_t shared = inter * m.num_shared_experts;
        expect_shape(p + "mlp.shared_experts.gate_proj.weight", {shared, hidden});
        expect_shape(p + "mlp.shared_experts.down_proj.weight", {hidden, shared});
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, FixtureShapes,
                         ::testing::Values("llama", "llama-bias", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3",
                                           "youtu", "gpt_oss"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string name = param_info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace drift::weights
