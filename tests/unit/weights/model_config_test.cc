#include "weights/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "scratch_dir.h"

namespace drift::weights {
namespace {

using nlohmann::json;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::ScratchDir;

std::string fixture(const char* model) { return std::string(DRIFT_FIXTURES_DIR) + "/models/" + model; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ModelConfig load_ok(const char* model) {
  Expected<ModelConfig> c = load_model_config(fixture(model));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

ModelConfig parse_ok(const json& config, const json& generation = nullptr) {
  Expected<ModelConfig> c =
      parse_model_config(config.dump(), generation.is_null() ? std::string() : generation.dump(), "inline/config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

Status parse_error(const json& config, const json& generation = nullptr) {
  Expected<ModelConfig> c =
      parse_model_config(config.dump(), generation.is_null() ? std::string() : generation.dump(), "inline/config.json");
  EXPECT_FALSE(c.ok()) << "parsed, but should not have: " << config.dump();
  return c.ok() ? Status::Ok() : c.status();
}

// DeepSeek-V3 config.json as published (ecosystem.md §4.2).
json deepseek_v3_config() {
  return json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "ep_size": 1, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1,
    "first_k_dense_replace": 3, "norm_topk_prob": true, "scoring_func": "sigmoid", "hidden_act": "silu",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "tie_word_embeddings": false,
    "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]}
  })");
}

// DeepSeek-V2-Lite (algorithms.md §7.2): uncompressed query, softmax/greedy routing.
json deepseek_v2_lite_config() {
  return json::parse(R"({
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
    "vocab_size": 102400, "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
    "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
    "n_shared_experts": 2, "n_routed_experts": 64, "routed_scaling_factor": 1.0,
    "kv_lora_rank": 512, "q_lora_rank": null, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "topk_method": "greedy", "n_group": 1, "topk_group": 1, "num_experts_per_tok": 6, "moe_layer_freq": 1,
    "first_k_dense_replace": 1, "norm_topk_prob": false, "scoring_func": "softmax",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "bos_token_id": 100000, "eos_token_id": 100001, "torch_dtype": "bfloat16"
  })");
}

// YoutuConfig defaults (ecosystem.md §4.2, algorithms.md §7.1), saved as transformers 5 writes them: with
// its head_dim attribute, which for MLA holds qk_rope_head_dim.
json youtu_config() {
  return json::parse(R"({
    "architectures": ["YoutuForCausalLM"], "model_type": "youtu",
    "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 32,
    "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "head_dim": 64,
    "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-06,
    "bos_token_id": 128000, "eos_token_id": 128001, "tie_word_embeddings": true,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "rope_interleave": true,
    "attention_bias": false, "dtype": "bfloat16"
  })");
}

// gpt-oss-20b (ecosystem.md §4.2, algorithms.md §6).
json gpt_oss_config() {
  json c = json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4, "sliding_window": 128,
    "attention_bias": true, "rope_theta": 150000,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
                     "original_max_position_embeddings": 4096},
    "initial_context_length": 4096, "max_position_embeddings": 131072, "swiglu_limit": 7.0,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "hidden_act": "silu",
    "eos_token_id": 200002, "pad_token_id": 199999,
    "quantization_config": {"quant_method": "mxfp4",
                            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"]}
  })");
  json& types = c["layer_types"] = json::array();
  for (int i = 0; i < 24; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return c;
}

TEST(ModelConfig, LlamaFixtureWithLlama3Rope) {
  const ModelConfig c = load_ok("llama");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 704);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32);
  EXPECT_EQ(c.rope.rotary_dim, 16);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_FALSE(c.mla);
  EXPECT_FALSE(c.moe);
  EXPECT_THAT(c.layer_types, ElementsAre(LayerAttention::kFull, LayerAttention::kFull));
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_FALSE(c.attention_sinks);
  EXPECT_EQ(c.quant_method, "");
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1, 4));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.default_temperature);
  EXPECT_FALSE(c.default_top_k);
}

TEST(ModelConfig, LlamaBiasAppliesAttentionBiasToTheOutputProjectionToo) {
  const ModelConfig c = load_ok("llama-bias");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.attention_out_bias);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_EQ(c.head_dim, 24);  // explicit, not hidden / heads = 16
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000);
  EXPECT_EQ(c.rope.rotary_dim, 24);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));
  EXPECT_EQ(c.torch_dtype, "float16");
}

TEST(ModelConfig, Qwen2HasQkvBiasAndReadsLegacyRopeScaling) {
  const ModelConfig c = load_ok("qwen2");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_EQ(c.head_dim, 16);                  // no head_dim field: 96 / 6
  EXPECT_EQ(c.rope.type, RopeType::kLinear);  // "type", not "rope_type"
  EXPECT_DOUBLE_EQ(c.rope.factor, 2);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1000000);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_THAT(c.layer_types, Each(LayerAttention::kFull));
  EXPECT_EQ(c.bos_token_id, 7);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(6, 7));
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_FALSE(c.qk_norm);
}

TEST(ModelConfig, Qwen3HasQkNormExplicitHeadDimAndYarn) {
  const ModelConfig c = load_ok("qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);  // explicit, not 64 / 4
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1000000);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1);
  EXPECT_FALSE(c.rope.attention_factor);
  EXPECT_TRUE(c.rope.truncate);
  EXPECT_EQ(c.rope.rotary_dim, 32);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(ModelConfig, DeepseekV2FixtureRotatesPairsAndRoutesGreedily) {
  const ModelConfig c = load_ok("deepseek_v2");
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 0);  // null: plain q_proj
  EXPECT_EQ(c.mla->kv_lora_rank, 32);
  EXPECT_EQ(c.mla->qk_nope_head_dim, 16);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 8);
  EXPECT_EQ(c.mla->v_head_dim, 16);
  EXPECT_EQ(c.head_dim, 24);  // the file's head_dim 8 is the rope width
  EXPECT_EQ(c.rope.rotary_dim, 8);
  EXPECT_TRUE(c.rope.interleaved);  // no rope_interleave field: V2 always rotates pairs
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 64);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->num_experts_per_tok, 2);
  EXPECT_EQ(c.moe->moe_intermediate_size, 32);
  EXPECT_EQ(c.moe->num_shared_experts, 2);
  EXPECT_EQ(c.moe->first_k_dense_replace, 1);
  EXPECT_EQ(c.moe->n_group, 1);  // null in the file
  EXPECT_EQ(c.moe->topk_group, 1);
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->scoring, MoeConfig::kSoftmax);
  EXPECT_EQ(c.moe->topk_method, MoeConfig::kGreedy);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(6, 7));
}

TEST(ModelConfig, DeepseekV3FixtureUsesSigmoidGroupRouting) {
  const ModelConfig c = load_ok("deepseek_v3");
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 48);
  EXPECT_EQ(c.mla->v_head_dim, 12);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.8);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts_per_tok, 3);
  EXPECT_EQ(c.moe->n_group, 2);
  EXPECT_EQ(c.moe->topk_group, 1);
  EXPECT_EQ(c.moe->num_shared_experts, 1);
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 2.5);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->scoring, MoeConfig::kSigmoid);
  EXPECT_EQ(c.moe->topk_method, MoeConfig::kNoauxTc);
}

TEST(ModelConfig, YoutuFixtureCanTurnInterleavingOff) {
  const ModelConfig c = load_ok("youtu");
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 16);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope.rotary_dim, 16);
  EXPECT_FALSE(c.rope.interleaved);  // rope_interleave: false in this file
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.moe);
}

TEST(ModelConfig, GptOssFixtureAlternatesWindowAndHasSinks) {
  const ModelConfig c = load_ok("gpt_oss");
  EXPECT_THAT(c.layer_types, ElementsAre(LayerAttention::kSliding, LayerAttention::kFull, LayerAttention::kSliding));
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_TRUE(c.attention_sinks);
  EXPECT_TRUE(c.attention_out_bias);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 7.0);
  EXPECT_EQ(c.quant_method, "mxfp4");
  EXPECT_FALSE(c.rope.truncate);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->num_experts_per_tok, 4);
  EXPECT_EQ(c.moe->moe_intermediate_size, 64);
}

TEST(ModelConfig, Qwen2SlidingWindowAppliesFromMaxWindowLayersWhenEnabled) {
  json config = json::parse(read_text(fixture("qwen2") + "/config.json"));
  config.erase("layer_types");
  config["num_hidden_layers"] = 4;
  config["sliding_window"] = 64;
  config["max_window_layers"] = 2;
  EXPECT_THAT(parse_ok(config).layer_types, Each(LayerAttention::kFull));  // use_sliding_window is false

  config["use_sliding_window"] = true;
  const ModelConfig c = parse_ok(config);
  EXPECT_EQ(c.sliding_window, 64);
  EXPECT_THAT(c.layer_types, ElementsAre(LayerAttention::kFull, LayerAttention::kFull, LayerAttention::kSliding,
                                         LayerAttention::kSliding));
}

TEST(ModelConfig, DeepseekV3MlaMoeAndFp8) {
  const ModelConfig c = parse_ok(deepseek_v3_config());
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla->v_head_dim, 128);
  EXPECT_EQ(c.head_dim, 192);
  EXPECT_EQ(c.rope.rotary_dim, 64);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 1.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);

  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 256);
  EXPECT_EQ(c.moe->num_experts_per_tok, 8);
  EXPECT_EQ(c.moe->moe_intermediate_size, 2048);
  EXPECT_EQ(c.moe->num_shared_experts, 1);
  EXPECT_EQ(c.moe->first_k_dense_replace, 3);
  EXPECT_EQ(c.moe->n_group, 8);
  EXPECT_EQ(c.moe->topk_group, 4);
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 2.5);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->scoring, MoeConfig::kSigmoid);
  EXPECT_EQ(c.moe->topk_method, MoeConfig::kNoauxTc);

  EXPECT_EQ(c.quant_method, "fp8");
  EXPECT_THAT(c.quant_block_size, ElementsAre(128, 128));
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ModelConfig, DeepseekV3RoutingDefaultsFollowItsModelingCode) {
  json config = deepseek_v3_config();
  config.erase("scoring_func");
  config.erase("topk_method");
  config.erase("norm_topk_prob");
  const ModelConfig c = parse_ok(config);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->scoring, MoeConfig::kSigmoid);
  EXPECT_EQ(c.moe->topk_method, MoeConfig::kNoauxTc);
  EXPECT_TRUE(c.moe->norm_topk_prob);
}

TEST(ModelConfig, DeepseekV2WithEveryLayerDenseHasNoMoe) {
  // As transformers saves a dense MLA model: expert fields present but null or unused.
  json config = deepseek_v2_lite_config();
  config["first_k_dense_replace"] = config["num_hidden_layers"];
  config["num_experts_per_tok"] = nullptr;
  config["n_group"] = nullptr;
  const ModelConfig c = parse_ok(config);
  ASSERT_TRUE(c.mla);
  EXPECT_FALSE(c.moe);
}

TEST(ModelConfig, DeepseekV2LiteHasAPlainQueryProjection) {
  const ModelConfig c = parse_ok(deepseek_v2_lite_config());
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 0);
  EXPECT_EQ(c.head_dim, 192);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 64);
  EXPECT_EQ(c.moe->num_experts_per_tok, 6);
  EXPECT_EQ(c.moe->moe_intermediate_size, 1408);
  EXPECT_EQ(c.moe->num_shared_experts, 2);
  EXPECT_EQ(c.moe->first_k_dense_replace, 1);
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->scoring, MoeConfig::kSoftmax);
  EXPECT_EQ(c.moe->topk_method, MoeConfig::kGreedy);
  EXPECT_EQ(c.intermediate_size, 10944);
  EXPECT_EQ(c.bos_token_id, 100000);
}

TEST(ModelConfig, YoutuIsDenseMlaWithInterleavedRope) {
  const ModelConfig c = parse_ok(youtu_config());
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.head_dim, 192);  // not the stored head_dim 64, which is the rope width
  EXPECT_EQ(c.rope.rotary_dim, 64);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_FALSE(c.moe);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001));
  EXPECT_EQ(c.torch_dtype, "bfloat16");

  json untied_default = youtu_config();
  untied_default.erase("tie_word_embeddings");
  untied_default.erase("rope_interleave");
  const ModelConfig d = parse_ok(untied_default);
  EXPECT_TRUE(d.tie_word_embeddings);  // YoutuConfig's default
  EXPECT_TRUE(d.rope.interleaved);

  json halves = youtu_config();
  halves["rope_interleave"] = false;
  EXPECT_FALSE(parse_ok(halves).rope.interleaved);
}

TEST(ModelConfig, GptOssSinksSlidingWindowMoeAndMxfp4) {
  const json generation = json::parse(R"({"bos_token_id": 199998, "eos_token_id": [200002, 199999, 200012],
                                          "pad_token_id": 199999})");
  const ModelConfig c = parse_ok(gpt_oss_config(), generation);
  EXPECT_EQ(c.head_dim, 64);  // q width 4096 differs from hidden 2880
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.attention_out_bias);
  EXPECT_TRUE(c.attention_sinks);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 7.0);
  EXPECT_EQ(c.sliding_window, 128);
  ASSERT_EQ(c.layer_types.size(), 24u);
  EXPECT_EQ(c.layer_types[0], LayerAttention::kSliding);
  EXPECT_EQ(c.layer_types[1], LayerAttention::kFull);
  EXPECT_EQ(c.layer_types[22], LayerAttention::kSliding);
  EXPECT_EQ(c.layer_types[23], LayerAttention::kFull);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 150000);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_EQ(c.rope.rotary_dim, 64);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 32);
  EXPECT_EQ(c.moe->num_experts_per_tok, 4);
  EXPECT_EQ(c.moe->moe_intermediate_size, 2880);
  EXPECT_EQ(c.moe->num_shared_experts, 0);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->scoring, MoeConfig::kSoftmax);
  EXPECT_FALSE(c.mla);
  EXPECT_EQ(c.quant_method, "mxfp4");
  // generation_config.json wins over config.json.
  EXPECT_EQ(c.bos_token_id, 199998);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(200002, 199999, 200012));
}

TEST(ModelConfig, GptOssWithoutLayerTypesAlternatesStartingWithSliding) {
  json config = gpt_oss_config();
  config.erase("layer_types");
  config.erase("num_experts_per_tok");  // the reference checkpoint's own name is experts_per_token
  const ModelConfig c = parse_ok(config);
  for (size_t i = 0; i < c.layer_types.size(); ++i)
    EXPECT_EQ(c.layer_types[i], i % 2 == 0 ? LayerAttention::kSliding : LayerAttention::kFull) << i;
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts_per_tok, 4);
}

TEST(ModelConfig, GenerationConfigSuppliesSamplingDefaults) {
  const json generation = json::parse(R"({"bos_token_id": 7, "eos_token_id": [151645, 151643], "do_sample": true,
                                          "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                                          "repetition_penalty": 1.05})");
  const ModelConfig c = parse_ok(json::parse(read_text(fixture("qwen3") + "/config.json")), generation);
  EXPECT_FLOAT_EQ(c.default_temperature.value_or(-1), 0.6f);
  EXPECT_EQ(c.default_top_k.value_or(-1), 20);
  EXPECT_FLOAT_EQ(c.default_top_p.value_or(-1), 0.95f);
  EXPECT_FLOAT_EQ(c.default_repetition_penalty.value_or(-1), 1.05f);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645, 151643));
}

TEST(ModelConfig, UnknownArchitectureIsNotAnErrorHere) {
  json config = json::parse(read_text(fixture("llama") + "/config.json"));
  config["architectures"] = {"FancyNewForCausalLM"};
  config["model_type"] = "fancy_new";
  EXPECT_EQ(parse_ok(config).architecture, "FancyNewForCausalLM");
}

TEST(ModelConfig, MissingHiddenSizeNamesFieldAndFile) {
  ScratchDir dir;
  json config = json::parse(read_text(fixture("llama") + "/config.json"));
  config.erase("hidden_size");
  const std::string path = dir.write("config.json", config.dump());
  Expected<ModelConfig> c = load_model_config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("missing required field 'hidden_size'"));
  EXPECT_THAT(c.status().message(), HasSubstr(path));
}

TEST(ModelConfig, WrongTypeForNumHiddenLayersNamesFieldAndFile) {
  ScratchDir dir;
  json config = json::parse(read_text(fixture("qwen3") + "/config.json"));
  config["num_hidden_layers"] = "2";
  const std::string path = dir.write("config.json", config.dump());
  Expected<ModelConfig> c = load_model_config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("field 'num_hidden_layers' must be an integer, got string"));
  EXPECT_THAT(c.status().message(), HasSubstr(path));
}

TEST(ModelConfig, BadGenerationConfigNamesThatFile) {
  ScratchDir dir;
  dir.write("config.json", read_text(fixture("qwen3") + "/config.json"));
  const std::string path = dir.write("generation_config.json", R"({"temperature": "warm"})");
  Expected<ModelConfig> c = load_model_config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(path));
  EXPECT_THAT(c.status().message(), HasSubstr("'temperature' must be a number"));
}

TEST(ModelConfig, MissingConfigFileIsNotFound) {
  ScratchDir dir;
  Expected<ModelConfig> c = load_model_config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr(dir.file("config.json")));
}

TEST(ModelConfig, InvalidJsonNamesTheSource) {
  Expected<ModelConfig> c = parse_model_config(R"({"hidden_size": )", "", "some/model/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("some/model/config.json"));
  EXPECT_THAT(c.status().message(), HasSubstr("not valid JSON"));
}

TEST(ModelConfig, UnsupportedRopeScalingIsAnError) {
  for (const char* type : {"longrope", "su", "mrope"}) {
    json config = json::parse(read_text(fixture("qwen2") + "/config.json"));
    config["rope_scaling"] = {{"type", type}, {"factor", 2.0}};
    const Status s = parse_error(config);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << type;
    EXPECT_THAT(s.message(), HasSubstr(std::string("rope type '") + type + "'"));
    EXPECT_THAT(s.message(), HasSubstr("rope_scaling.type"));
    EXPECT_THAT(s.message(), HasSubstr("inline/config.json"));
  }
}

TEST(ModelConfig, RopeScalingWithoutFactorIsAnError) {
  json config = json::parse(read_text(fixture("llama") + "/config.json"));
  config["rope_parameters"].erase("factor");
  EXPECT_THAT(parse_error(config).message(), HasSubstr("missing required field 'rope_parameters.factor'"));
}

TEST(ModelConfig, BadFieldValuesAreNamed) {
  const json base = json::parse(read_text(fixture("llama") + "/config.json"));
  struct Case {
    const char* field;
    json value;
    const char* expected;
  };
  const Case cases[] = {
      {"eos_token_id", "</s>", "field 'eos_token_id' must be an integer"},
      {"eos_token_id", json::array({1, "x"}), "field 'eos_token_id' must be an integer or a list of integers"},
      {"tie_word_embeddings", 1, "field 'tie_word_embeddings' must be true or false, got number"},
      {"rms_norm_eps", "1e-5", "field 'rms_norm_eps' must be a number, got string"},
      {"num_key_value_heads", 3, "field 'num_key_value_heads' (3) must divide num_attention_heads (4)"},
      {"hidden_size", 0, "field 'hidden_size' must be positive, got 0"},
      {"layer_types", json::array({"full_attention"}), "field 'layer_types' has 1 entries but num_hidden_layers is 2"},
      {"layer_types", json::array({"full_attention", "linear_attention"}), "layer_types[1] is 'linear_attention'"},
      {"architectures", "LlamaForCausalLM", "field 'architectures' must be a list of strings, got string"},
      {"quantization_config", json::object({{"quant_method", "awq"}}), "quant_method 'awq' is not supported"},
  };
  for (const Case& c : cases) {
    json config = base;
    config[c.field] = c.value;
    const Status s = parse_error(config);
    EXPECT_THAT(s.message(), HasSubstr(c.expected)) << c.field;
    EXPECT_THAT(s.message(), HasSubstr("inline/config.json")) << c.field;
  }
}

TEST(ModelConfig, HeadDimMustBeDerivableWhenAbsent) {
  json config = json::parse(read_text(fixture("qwen2") + "/config.json"));
  config["num_attention_heads"] = 5;
  config["num_key_value_heads"] = 5;
  EXPECT_THAT(parse_error(config).message(), HasSubstr("is not a multiple of num_attention_heads (5)"));
}

TEST(ModelConfig, MoeRoutingValuesAreChecked) {
  json config = deepseek_v3_config();
  config["num_experts_per_tok"] = 300;
  EXPECT_THAT(parse_error(config).message(), HasSubstr("field 'num_experts_per_tok' must be in [1, 256]"));
  config = deepseek_v3_config();
  config["scoring_func"] = "sparsemax";
  EXPECT_THAT(parse_error(config).message(), HasSubstr("scoring_func 'sparsemax' is not supported"));
  config = deepseek_v3_config();
  config["n_group"] = 7;
  EXPECT_THAT(parse_error(config).message(), HasSubstr("field 'n_group' (7) must divide the expert count (256)"));
}

}  // namespace
}  // namespace drift::weights
