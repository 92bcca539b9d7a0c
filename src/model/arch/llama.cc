// Llama family: Llama 2/3, Qwen2 / Qwen2.5, Qwen3. Pre-norm decoder layers of GQA attention and a SwiGLU
// MLP; the members differ only in config flags (biases, qk-norm, tied embeddings, RoPE scaling).
#include "model/arch/llama.h"

#include <fmt/format.h>

#include "model/layers/decoder_stream.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/rope.h"

namespace drift::model {

namespace {

struct LlamaLayer {
  RmsNorm input_norm, post_attention_norm;
  GqaAttention attention;
  GatedMlp mlp;
};

class LlamaModel final : public Model {
 public:
  explicit LlamaModel(weights::ModelConfig config) : Model(std::move(config)) {}

  Status load(WeightLoader& loader) {
    const auto& c = config_;
    backend::Ops& ops = loader.ops();
    ops_ = &ops;
    DRIFT_ASSIGN_OR_RETURN(RopeFrequencies freqs, rope_frequencies(c.rope, c.rope.rotary_dim, c.max_position_embeddings));
    const std::vector<float> table = rope_cos_sin_table(freqs, c.max_position_embeddings);
    rope_table_ = ops.alloc(DType::kF32, {c.max_position_embeddings, c.rope.rotary_dim});
    ops.copy_from_host(rope_table_.view, table.data());

    attention_spec_ = {.hidden = c.hidden_size, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads,
                       .head_dim = c.head_dim, .qkv_bias = c.attention_bias, .o_bias = c.attention_out_bias,
                       .qk_norm = c.qk_norm, .sinks = false, .norm_eps = c.rms_norm_eps, .sliding_window = 0,
                       .rope = {rope_table_.view, int32_t(c.rope.rotary_dim), c.rope.interleaved}};
    DRIFT_RETURN_IF_ERROR(stream_.load(loader, c));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = fmt::format("model.layers.{}", i);
      LlamaLayer layer;
      DRIFT_RETURN_IF_ERROR(DecoderStream::load_layer_norms(loader, p, c, layer));
      DRIFT_ASSIGN_OR_RETURN(layer.attention, GqaAttention::load(loader, p + ".self_attn", attention_spec_));
      DRIFT_ASSIGN_OR_RETURN(layer.mlp, GatedMlp::load(loader, p + ".mlp", c.hidden_size, c.intermediate_size, c.mlp_bias));
      layers_.push_back(std::move(layer));
    }
    num_parameters_ = count_parameters();
    return Status::Ok();
  }

  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const override { return llama_kv_layout(config_, kv_dtype); }

  void allocate_kv_cache(int32_t num_blocks, int32_t block_size) override {
    for (auto& layer : layers_) layer.attention.allocate_cache(*ops_, num_blocks, block_size);
  }

  void allocate_workspace(int32_t max_tokens, int32_t max_logits) override {
    stream_.allocate(*ops_, max_tokens, max_logits, config_.hidden_size);
    attention_scratch_ = AttentionScratch::allocate(*ops_, max_tokens, attention_spec_);
    mlp_scratch_ = GatedMlp::allocate_scratch(*ops_, max_tokens, config_.intermediate_size);
  }

  void forward(const ForwardContext& ctx, const Tensor& logits) override {
    backend::Ops& ops = *ops_;
    stream_.forward(
        ops, ctx, layers_,
        [&](const LlamaLayer& layer, const Tensor& normed, const Tensor& out) {
          layer.attention.forward(ops, ctx, normed, attention_scratch_, out);
        },
        [&](const LlamaLayer& layer, const Tensor& normed, const Tensor& out) {
          layer.mlp.forward(ops, normed, mlp_scratch_, out);
        },
        logits);
  }

 private:
  int64_t count_parameters() const {
    const auto& c = config_;
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    int64_t per_layer = 2 * c.hidden_size + c.hidden_size * (q + 2 * kv) + q * c.hidden_size +
                        3 * c.hidden_size * c.intermediate_size;
    if (c.attention_bias) per_layer += q + 2 * kv;
    if (c.attention_out_bias) per_layer += c.hidden_size;
    if (c.mlp_bias) per_layer += 2 * c.intermediate_size + c.hidden_size;
    if (c.qk_norm) per_layer += 2 * c.head_dim;
    const int64_t embeddings = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2);
    return embeddings + c.hidden_size + c.num_layers * per_layer;
  }

  backend::Ops* ops_ = nullptr;
  backend::Buffer rope_table_;
  GqaAttentionSpec attention_spec_;
  std::vector<LlamaLayer> layers_;
  DecoderStream stream_;  // embedding, residual stream, final norm, LM head
  AttentionScratch attention_scratch_;
  GatedMlpScratch mlp_scratch_;
};

}  // namespace

std::vector<core::KvSpec> llama_kv_layout(const weights::ModelConfig& c, DType kv_dtype) {
  core::KvSpec full;
  full.name = "full";
  full.kind = core::KvKind::kGqa;
  full.kv_heads = int32_t(c.num_kv_heads);
  full.head_dim = int32_t(c.head_dim);
  full.dtype = kv_dtype;
  full.num_layers = int32_t(c.num_layers);
  return {full};
}

Expected<std::unique_ptr<Model>> build_llama(const weights::ModelConfig& config, WeightLoader& loader) {
  auto model = std::make_unique<LlamaModel>(config);
  DRIFT_RETURN_IF_ERROR(model->load(loader));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace drift::model
