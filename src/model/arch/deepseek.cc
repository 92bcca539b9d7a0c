// DeepSeek family: DeepSeek-V2 (-Lite), DeepSeek-V3 and Youtu-LLM. Pre-norm decoder layers of absorbed MLA
// attention and a SwiGLU feed-forward that is dense in the first first_k_dense_replace layers (and in every
// layer of Youtu) and a mixture of experts with shared experts after. The members differ in config fields
// only: a compressed or plain query, softmax or sigmoid routing, group limits, the correction bias.
#include "model/arch/deepseek.h"

#include <fmt/format.h>

#include "model/layers/decoder_stream.h"
#include "model/layers/mla_attention.h"
#include "model/layers/moe.h"
#include "model/layers/rope.h"

namespace drift::model {

namespace {

struct DeepseekLayer {
  RmsNorm input_norm, post_attention_norm;
  MlaAttention attention;
  std::optional<GatedMlp> mlp;  // dense layers
  std::optional<Moe> moe;       // mixture-of-experts layers
};

bool is_moe_layer(const weights::ModelConfig& c, int64_t layer) {
  return c.moe && layer >= c.moe->first_k_dense_replace && layer % c.moe->moe_layer_freq == 0;
}

MoeSpec deepseek_moe_spec(const weights::ModelConfig& c) {
  const weights::MoeConfig& m = *c.moe;
  MoeSpec s;
  s.hidden = c.hidden_size;
  s.ffn = m.moe_intermediate_size;
  s.num_experts = m.num_experts;
  s.top_k = m.num_experts_per_tok;
  s.shared_ffn = m.moe_intermediate_size * m.num_shared_experts;
  s.routing = moe_routing(m);
  return s;
}

// Checkpoints keep one gate/up/down triple per expert; they are stacked into [E, 2F, H] and [E, H, F].
Expected<Moe> load_deepseek_moe(WeightLoader& loader, const std::string& prefix, const MoeSpec& spec,
                                bool correction_bias) {
  MoeWeights w;
  DRIFT_ASSIGN_OR_RETURN(w.router, Linear::load(loader, prefix + ".gate", spec.num_experts, spec.hidden, false));
  if (correction_bias) {
    DRIFT_ASSIGN_OR_RETURN(w.correction_bias,
                           loader.load(prefix + ".gate.e_score_correction_bias", {spec.num_experts}));
  }
  std::vector<std::string> gate_up_names, down_names;
  std::vector<std::vector<int64_t>> gate_up_shapes, down_shapes;
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    const std::string expert = fmt::format("{}.experts.{}", prefix, e);
    gate_up_names.insert(gate_up_names.end(), {expert + ".gate_proj.weight", expert + ".up_proj.weight"});
    gate_up_shapes.insert(gate_up_shapes.end(), {{spec.ffn, spec.hidden}, {spec.ffn, spec.hidden}});
    down_names.push_back(expert + ".down_proj.weight");
    down_shapes.push_back({spec.hidden, spec.ffn});
  }
  DRIFT_ASSIGN_OR_RETURN(w.w_gate_up, loader.load_stacked(gate_up_names, gate_up_shapes));
  w.w_gate_up.view = w.w_gate_up.view.view({spec.num_experts, 2 * spec.ffn, spec.hidden});
  DRIFT_ASSIGN_OR_RETURN(w.w_down, loader.load_stacked(down_names, down_shapes));
  w.w_down.view = w.w_down.view.view({spec.num_experts, spec.hidden, spec.ffn});
  if (spec.shared_ffn > 0) {
    DRIFT_ASSIGN_OR_RETURN(w.shared,
                           GatedMlp::load(loader, prefix + ".shared_experts", spec.hidden, spec.shared_ffn, false));
  }
  return Moe(spec, std::move(w));
}

class DeepseekModel final : public Model {
 public:
  explicit DeepseekModel(weights::ModelConfig config) : Model(std::move(config)) {}

  Status load(WeightLoader& loader) {
    const auto& c = config_;
    if (!c.mla) return invalid_argument(fmt::format("{}: config has no kv_lora_rank (MLA fields)", c.architecture));
    if (c.hidden_act != "silu")
      return unsupported(
          fmt::format("hidden_act '{}' is not supported for {} (silu is)", c.hidden_act, c.architecture));
    ops_ = &loader.ops();
    DRIFT_ASSIGN_OR_RETURN(RopeFrequencies freqs,
                           rope_frequencies(c.rope, c.rope.rotary_dim, c.max_position_embeddings));
    const std::vector<float> table = rope_cos_sin_table(freqs, c.max_position_embeddings);
    rope_table_ = ops_->alloc(DType::kF32, {c.max_position_embeddings, c.rope.rotary_dim});
    ops_->copy_from_host(rope_table_.view, table.data());
    mla_ = mla_spec(c, {rope_table_.view, int32_t(c.rope.rotary_dim), c.rope.interleaved});
    if (c.moe) {
      moe_ = deepseek_moe_spec(c);
      DRIFT_RETURN_IF_ERROR(check_moe_spec(moe_));
    }
    const bool correction_bias = c.moe && c.moe->topk_method == weights::MoeConfig::kNoauxTc;

    DRIFT_RETURN_IF_ERROR(stream_.load(loader, c));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = fmt::format("model.layers.{}", i);
      DeepseekLayer layer;
      DRIFT_RETURN_IF_ERROR(DecoderStream::load_layer_norms(loader, p, c, layer));
      DRIFT_ASSIGN_OR_RETURN(layer.attention, MlaAttention::load(loader, p + ".self_attn", mla_));
      if (is_moe_layer(c, i)) {
        DRIFT_ASSIGN_OR_RETURN(layer.moe, load_deepseek_moe(loader, p + ".mlp", moe_, correction_bias));
      } else {
        DRIFT_ASSIGN_OR_RETURN(layer.mlp,
                               GatedMlp::load(loader, p + ".mlp", c.hidden_size, c.intermediate_size, c.mlp_bias));
      }
      layers_.push_back(std::move(layer));
    }
    num_parameters_ = count_parameters();
    return Status::Ok();
  }

  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const override { return deepseek_kv_layout(config_, kv_dtype); }

  void allocate_kv_cache(int32_t num_blocks, int32_t block_size) override {
    for (auto& layer : layers_) layer.attention.allocate_cache(*ops_, num_blocks, block_size);
  }

  void allocate_workspace(int32_t max_tokens, int32_t max_logits) override {
    stream_.allocate(*ops_, max_tokens, max_logits, config_.hidden_size);
    mla_scratch_ = MlaScratch::allocate(*ops_, max_tokens, mla_);
    mlp_scratch_ = GatedMlp::allocate_scratch(*ops_, max_tokens, config_.intermediate_size);
    if (config_.moe) moe_scratch_ = MoeScratch::allocate(*ops_, max_tokens, moe_);
  }

  void forward(const ForwardContext& ctx, const Tensor& logits) override {
    backend::Ops& ops = *ops_;
    stream_.forward(
        ops, ctx, layers_,
        [&](const DeepseekLayer& layer, const Tensor& normed, const Tensor& out) {
          layer.attention.forward(ops, ctx, normed, mla_scratch_, out);
        },
        [&](const DeepseekLayer& layer, const Tensor& normed, const Tensor& out) {
          if (layer.moe) {
            layer.moe->forward(ops, normed, moe_scratch_, out);
          } else {
            layer.mlp->forward(ops, normed, mlp_scratch_, out);
          }
        },
        logits);
  }

 private:
  int64_t count_parameters() const {
    const auto& c = config_;
    const int64_t dense_mlp = 3 * c.hidden_size * c.intermediate_size;
    int64_t n = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) + c.hidden_size;
    for (size_t i = 0; i < layers_.size(); ++i) {
      n += 2 * c.hidden_size + layers_[i].attention.num_parameters();
      if (!layers_[i].moe) {
        n += dense_mlp;
        continue;
      }
      n += moe_.num_experts * (c.hidden_size + 3 * c.hidden_size * moe_.ffn) + 3 * c.hidden_size * moe_.shared_ffn;
      if (c.moe->topk_method == weights::MoeConfig::kNoauxTc) n += moe_.num_experts;
    }
    return n;
  }

  backend::Ops* ops_ = nullptr;
  backend::Buffer rope_table_;
  MlaSpec mla_;
  MoeSpec moe_;
  std::vector<DeepseekLayer> layers_;
  DecoderStream stream_;  // embedding, residual stream, final norm, LM head
  MlaScratch mla_scratch_;
  GatedMlpScratch mlp_scratch_;
  MoeScratch moe_scratch_;
};

}  // namespace

std::vector<core::KvSpec> deepseek_kv_layout(const weights::ModelConfig& c, DType kv_dtype) {
  core::KvSpec latent;
  latent.name = "mla";
  latent.kind = core::KvKind::kMlaLatent;
  latent.latent_dim = c.mla ? int32_t(c.mla->kv_lora_rank + c.mla->qk_rope_head_dim) : 0;
  latent.dtype = kv_dtype;
  latent.num_layers = int32_t(c.num_layers);
  return {latent};
}

Expected<std::unique_ptr<Model>> build_deepseek(const weights::ModelConfig& config, WeightLoader& loader) {
  auto model = std::make_unique<DeepseekModel>(config);
  DRIFT_RETURN_IF_ERROR(model->load(loader));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace drift::model
