// GPT-OSS: pre-norm decoder layers of GQA attention (biases, a learned sink logit per head, a sliding window
// on the layers config.layer_types marks) and a mixture of experts: top-k of the router logits, softmax over
// the chosen, experts with biases and the clamped SwiGLU. Experts come as MXFP4 blocks + E8M0 scales
// (quantization_config.quant_method "mxfp4") or as bf16 matrices; both become MoeWeights at load.
#include "model/arch/gpt_oss.h"

#include <fmt/format.h>

#include <algorithm>

#include "model/layers/decoder_stream.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/moe.h"
#include "model/layers/rope.h"

namespace drift::model {

namespace {

// transformers hard-codes both in GptOssExperts; gpt-oss config.json files also carry swiglu_limit.
constexpr float kSwigluAlpha = 1.702f;
constexpr float kDefaultSwigluLimit = 7.0f;

struct GptOssLayer {
  RmsNorm input_norm, post_attention_norm;
  GqaAttention attention;
  Moe moe;
};

// [E, rows, cols] -> [E, cols, rows]: bf16 checkpoints keep the experts as x @ W ([in, out]); MoeWeights is [out, in].
std::vector<float> transpose_experts(const std::vector<float>& w, int64_t experts, int64_t rows, int64_t cols) {
  std::vector<float> t(w.size());
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t[size_t((e * cols + c) * rows + r)] = w[size_t((e * rows + r) * cols + c)];
  return t;
}

// Checkpoints interleave gate and up along the 2F outputs (gate = even, up = odd); MoeWeights wants the F gate
// rows first, then the F up rows. w: [E, 2F, width].
std::vector<float> gate_first(const std::vector<float>& w, int64_t experts, int64_t ffn, int64_t width) {
  std::vector<float> out(w.size());
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t j = 0; j < 2 * ffn; ++j) {
      const int64_t to = (j % 2 == 0 ? j / 2 : ffn + j / 2);
      std::copy_n(w.begin() + (e * 2 * ffn + j) * width, width, out.begin() + (e * 2 * ffn + to) * width);
    }
  return out;
}

Expected<Moe> load_gpt_oss_moe(WeightLoader& loader, const std::string& prefix, const MoeSpec& spec, bool mxfp4) {
  const int64_t e = spec.num_experts, h = spec.hidden, f = spec.ffn;
  const std::string experts = prefix + ".experts";
  MoeWeights w;
  DRIFT_ASSIGN_OR_RETURN(w.router, Linear::load(loader, prefix + ".router", e, h, true));
  std::vector<float> gate_up, down;
  if (mxfp4) {
    DRIFT_ASSIGN_OR_RETURN(gate_up, loader.read_host_mxfp4(experts + ".gate_up_proj", {e, 2 * f, h}));
    DRIFT_ASSIGN_OR_RETURN(down, loader.read_host_mxfp4(experts + ".down_proj", {e, h, f}));
  } else {
    DRIFT_ASSIGN_OR_RETURN(std::vector<float> gate_up_in_out,
                           loader.read_host(experts + ".gate_up_proj", {e, h, 2 * f}));
    DRIFT_ASSIGN_OR_RETURN(std::vector<float> down_in_out, loader.read_host(experts + ".down_proj", {e, f, h}));
    gate_up = transpose_experts(gate_up_in_out, e, h, 2 * f);
    down = transpose_experts(down_in_out, e, f, h);
  }
  DRIFT_ASSIGN_OR_RETURN(w.w_gate_up, loader.upload(gate_first(gate_up, e, f, h), {e, 2 * f, h}));
  DRIFT_ASSIGN_OR_RETURN(w.w_down, loader.upload(down, {e, h, f}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> gate_up_bias, loader.read_host(experts + ".gate_up_proj_bias", {e, 2 * f}));
  DRIFT_ASSIGN_OR_RETURN(w.b_gate_up, loader.upload(gate_first(gate_up_bias, e, f, 1), {e, 2 * f}));
  DRIFT_ASSIGN_OR_RETURN(w.b_down, loader.load(experts + ".down_proj_bias", {e, h}));
  return Moe(spec, std::move(w));
}

class GptOssModel final : public Model {
 public:
  explicit GptOssModel(weights::ModelConfig config) : Model(std::move(config)) {}

  Status load(WeightLoader& loader) {
    const auto& c = config_;
    if (!c.moe) return invalid_argument(fmt::format("{}: config has no num_local_experts", c.architecture));
    if (!c.quant_method.empty() && c.quant_method != "mxfp4")
      return unsupported(fmt::format("{}: quantization_config.quant_method '{}' is not supported (mxfp4 is)",
                                     c.architecture, c.quant_method));
    ops_ = &loader.ops();
    DRIFT_ASSIGN_OR_RETURN(RopeFrequencies freqs,
                           rope_frequencies(c.rope, c.rope.rotary_dim, c.max_position_embeddings));
    const std::vector<float> table = rope_cos_sin_table(freqs, c.max_position_embeddings);
    rope_table_ = ops_->alloc(DType::kF32, {c.max_position_embeddings, c.rope.rotary_dim});
    ops_->copy_from_host(rope_table_.view, table.data());

    attention_spec_ = {.hidden = c.hidden_size, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads,
                       .head_dim = c.head_dim, .qkv_bias = c.attention_bias, .o_bias = c.attention_out_bias,
                       .qk_norm = false, .sinks = c.attention_sinks, .norm_eps = c.rms_norm_eps, .sliding_window = 0,
                       .rope = {rope_table_.view, int32_t(c.rope.rotary_dim), c.rope.interleaved}};
    moe_.hidden = c.hidden_size;
    moe_.ffn = c.moe->moe_intermediate_size;
    moe_.num_experts = c.moe->num_experts;
    moe_.top_k = c.moe->num_experts_per_tok;
    moe_.routing = moe_routing(*c.moe);
    moe_.swiglu_limit = c.swiglu_limit > 0 ? float(c.swiglu_limit) : kDefaultSwigluLimit;
    moe_.swiglu_alpha = kSwigluAlpha;
    DRIFT_RETURN_IF_ERROR(check_moe_spec(moe_));

    const bool has_sliding =
        std::find(c.layer_types.begin(), c.layer_types.end(), weights::LayerAttention::kSliding) != c.layer_types.end();
    DRIFT_RETURN_IF_ERROR(stream_.load(loader, c));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = fmt::format("model.layers.{}", i);
      GqaAttentionSpec spec = attention_spec_;
      // Layer groups in gpt_oss_kv_layout order: the sliding group (when any layer slides), then the full one.
      const bool slides = c.layer_types[size_t(i)] == weights::LayerAttention::kSliding;
      spec.sliding_window = slides ? int32_t(c.sliding_window) : 0;
      spec.kv_group = slides || !has_sliding ? 0 : 1;
      GptOssLayer layer;
      DRIFT_RETURN_IF_ERROR(DecoderStream::load_layer_norms(loader, p, c, layer));
      DRIFT_ASSIGN_OR_RETURN(layer.attention, GqaAttention::load(loader, p + ".self_attn", spec));
      DRIFT_ASSIGN_OR_RETURN(layer.moe, load_gpt_oss_moe(loader, p + ".mlp", moe_, c.quant_method == "mxfp4"));
      layers_.push_back(std::move(layer));
    }
    num_parameters_ = count_parameters();
    return Status::Ok();
  }

  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const override { return gpt_oss_kv_layout(config_, kv_dtype); }

  void allocate_kv_cache(int32_t num_blocks, int32_t block_size) override {
    for (auto& layer : layers_) layer.attention.allocate_cache(*ops_, num_blocks, block_size);
  }

  void allocate_workspace(int32_t max_tokens, int32_t max_logits) override {
    stream_.allocate(*ops_, max_tokens, max_logits, config_.hidden_size);
    attention_scratch_ = AttentionScratch::allocate(*ops_, max_tokens, attention_spec_);
    moe_scratch_ = MoeScratch::allocate(*ops_, max_tokens, moe_);
  }

  void forward(const ForwardContext& ctx, const Tensor& logits) override {
    backend::Ops& ops = *ops_;
    stream_.forward(
        ops, ctx, layers_,
        [&](const GptOssLayer& layer, const Tensor& normed, const Tensor& out) {
          layer.attention.forward(ops, ctx, normed, attention_scratch_, out);
        },
        [&](const GptOssLayer& layer, const Tensor& normed, const Tensor& out) {
          layer.moe.forward(ops, normed, moe_scratch_, out);
        },
        logits);
  }

 private:
  int64_t count_parameters() const {
    const auto& c = config_;
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    const int64_t e = moe_.num_experts, h = c.hidden_size, f = moe_.ffn;
    int64_t attention = h * (q + 2 * kv) + q * h + c.num_heads;
    if (c.attention_bias) attention += q + 2 * kv;
    if (c.attention_out_bias) attention += h;
    const int64_t experts = e * (h + 1) + e * (2 * f * h + 2 * f + h * f + h);
    const int64_t embeddings = c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2);
    return embeddings + h + c.num_layers * (2 * h + attention + experts);
  }

  backend::Ops* ops_ = nullptr;
  backend::Buffer rope_table_;
  GqaAttentionSpec attention_spec_;
  MoeSpec moe_;
  std::vector<GptOssLayer> layers_;
  DecoderStream stream_;  // embedding, residual stream, final norm, LM head
  AttentionScratch attention_scratch_;
  MoeScratch moe_scratch_;
};

}  // namespace

std::vector<core::KvSpec> gpt_oss_kv_layout(const weights::ModelConfig& c, DType kv_dtype) {
  int32_t sliding = 0;
  for (const auto kind : c.layer_types) sliding += kind == weights::LayerAttention::kSliding ? 1 : 0;
  core::KvSpec spec;
  spec.kind = core::KvKind::kGqa;
  spec.kv_heads = int32_t(c.num_kv_heads);
  spec.head_dim = int32_t(c.head_dim);
  spec.dtype = kv_dtype;
  std::vector<core::KvSpec> groups;
  if (sliding > 0) {
    spec.name = "sliding";
    spec.num_layers = sliding;
    spec.sliding_window = int32_t(c.sliding_window);
    groups.push_back(spec);
  }
  if (sliding < c.num_layers) {
    spec.name = "full";
    spec.num_layers = int32_t(c.num_layers) - sliding;
    spec.sliding_window = 0;
    groups.push_back(spec);
  }
  return groups;
}

Expected<std::unique_ptr<Model>> build_gpt_oss(const weights::ModelConfig& config, WeightLoader& loader) {
  auto model = std::make_unique<GptOssModel>(config);
  DRIFT_RETURN_IF_ERROR(model->load(loader));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace drift::model
