#include "model/decoder_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "base/check.h"
#include "model/layer_plan.h"
#include "model/layers/decoder_stream.h"
#include "model/layers/dsa_indexer.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/mla_attention.h"
#include "model/layers/mla_lite_attention.h"
#include "model/layers/rope.h"
#include "model/tensor_split.h"

namespace drift::model {

namespace {

// One layer as its LayerKind says: exactly one attention and one feed-forward are set; a DSA-lite indexer
// when the layer's attention is sparse.
struct DecoderLayer {
  RmsNorm input_norm, post_attention_norm;
  std::optional<GqaAttention> gqa;
  std::optional<MlaAttention> mla;
  std::optional<MlaLiteAttention> mla_lite;
  std::optional<DsaIndexer> indexer;
  std::optional<GatedMlp> mlp;
  std::optional<Moe> moe;
};

class DecoderModel final : public Model {
 public:
  DecoderModel(weights::ModelConfig config, LayerPlan plan, const DecoderFamily& family)
      : Model(std::move(config)), plan_(std::move(plan)), family_(family) {
    description_ = family.description;
  }

  Status load(WeightLoader& loader) {
    const auto& c = config_;
    ops_ = &loader.ops();
    split_ = {.rank = ops_->rank(), .world = ops_->world_size()};
    DRIFT_ASSIGN_OR_RETURN(RopeFrequencies freqs, rope_frequencies(c.rope, c.rope.rotary_dim, c.max_position_embeddings));
    const int64_t positions = c.rope_positions > 0 ? c.rope_positions : c.max_position_embeddings;
    const backend::RopeParams rope = upload_rope(freqs, positions, c.rope.interleaved, rope_table_);
    gqa_ = {.hidden = c.hidden_size, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
            .qkv_bias = c.attention_bias, .o_bias = c.attention_out_bias, .qk_norm = c.qk_norm,
            .sinks = c.attention_sinks, .norm_eps = c.rms_norm_eps, .sliding_window = 0, .kv_group = 0, .rope = rope,
            .split = split_};
    if (c.mla) {
      mla_ = mla_spec(c, rope);
      mla_.split = split_;
    }
    if (c.retrofit && c.retrofit->mla_lite) {
      mla_lite_ = mla_lite_spec(c);
      mla_lite_.rope = mla_lite_rope(freqs, positions);
      mla_lite_.split = split_;
    }
    if (c.retrofit && c.retrofit->dsa_lite) {
      dsa_ = dsa_indexer_spec(c);
      if (c.retrofit->dsa_lite->index_rope > 0) {
        DRIFT_ASSIGN_OR_RETURN(dsa_.rope, dsa_index_rope(positions));
      }
    }
    if (c.moe) {
      moe_ = moe_spec(c, *ops_);
      DRIFT_RETURN_IF_ERROR(check_moe_spec(moe_));
    }
    DRIFT_RETURN_IF_ERROR(stream_.load(loader, c));
    for (size_t i = 0; i < plan_.layers.size(); ++i) {
      DRIFT_ASSIGN_OR_RETURN(DecoderLayer layer, load_layer(loader, i));
      layers_.push_back(std::move(layer));
    }
    num_parameters_ = loader.num_parameters();
    return Status::Ok();
  }

  // A rank's blocks hold its kv heads (MLA: the whole latent, replicated).
  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const override {
    std::vector<core::KvSpec> specs = plan_.kv_specs(kv_dtype);
    for (core::KvSpec& s : specs)
      if (s.kind == core::KvKind::kGqa) s.kv_heads = int32_t(gqa_.local_kv_heads());
    return specs;
  }

  void allocate_kv_cache(std::span<const int32_t> num_blocks, int32_t block_size, DType kv_dtype) override {
    DRIFT_CHECK_EQ(num_blocks.size(), plan_.kv_groups.size());
    int64_t widest = 0;  // cache row of any layer, in elements
    for (size_t i = 0; i < layers_.size(); ++i) {
      const int32_t blocks = num_blocks[size_t(plan_.layers[i].kv_group)];
      if (layers_[i].gqa) layers_[i].gqa->allocate_cache(*ops_, blocks, block_size, kv_dtype);
      if (layers_[i].mla) layers_[i].mla->allocate_cache(*ops_, blocks, block_size, kv_dtype);
      if (layers_[i].mla_lite) layers_[i].mla_lite->allocate_cache(*ops_, blocks, block_size, kv_dtype);
      if (layers_[i].indexer)
        layers_[i].indexer->allocate_cache(*ops_, num_blocks[size_t(plan_.layers[i].index_group)], block_size, kv_dtype);
      widest = std::max(widest, layers_[i].mla ? mla_.cache_width() : gqa_.local_kv_heads() * gqa_.head_dim);
      if (layers_[i].mla_lite) widest = std::max(widest, mla_lite_.cache_width());
      if (layers_[i].indexer) widest = std::max(widest, dsa_.dim);
    }
    move_scratch_ = ops_->alloc(kv_dtype, {std::max<int64_t>(max_tokens_, 1) * widest});
  }

  void move_kv(std::span<const KvRowMoves> groups) override {
    DRIFT_CHECK_EQ(groups.size(), plan_.kv_groups.size());
    for (size_t i = 0; i < layers_.size(); ++i) {
      const KvRowMoves& moves = groups[size_t(plan_.layers[i].kv_group)];
      if (layers_[i].gqa) layers_[i].gqa->move_kv(*ops_, moves, move_scratch_.view);
      if (layers_[i].mla) layers_[i].mla->cache().move_rows(*ops_, moves, move_scratch_.view);
      if (layers_[i].mla_lite) layers_[i].mla_lite->cache().move_rows(*ops_, moves, move_scratch_.view);
      if (layers_[i].indexer)
        move_cache_rows(*ops_, layers_[i].indexer->cache(), groups[size_t(plan_.layers[i].index_group)],
                        move_scratch_.view);
    }
  }

  void allocate_workspace(int32_t max_tokens, int32_t max_logits) override {
    max_tokens_ = max_tokens;
    stream_.allocate(*ops_, max_tokens, max_logits, config_.hidden_size);
    bool gqa = false, mla = false, dense = false, moe = false;
    for (const LayerKind& k : plan_.layers) {
      gqa = gqa || k.attention == AttentionKind::kGqa;
      mla = mla || k.attention == AttentionKind::kMla;
      dense = dense || k.feed_forward == FeedForwardKind::kDense;
      moe = moe || k.feed_forward == FeedForwardKind::kMoe;
    }
    if (gqa) gqa_scratch_ = AttentionScratch::allocate(*ops_, max_tokens, gqa_);
    if (mla) mla_scratch_ = MlaScratch::allocate(*ops_, max_tokens, mla_);
    if (config_.retrofit && config_.retrofit->mla_lite) mla_lite_scratch_ = MlaLiteScratch::allocate(*ops_, max_tokens, mla_lite_);
    if (config_.retrofit && config_.retrofit->dsa_lite) dsa_scratch_ = DsaScratch::allocate(*ops_, max_tokens, dsa_);
    if (dense) mlp_scratch_ = GatedMlp::allocate_scratch(*ops_, max_tokens, split_.part(config_.intermediate_size));
    if (moe) moe_scratch_ = MoeScratch::allocate(*ops_, max_tokens, moe_);
  }

  void forward(const ForwardContext& ctx, const Tensor& logits) override {
    backend::Ops& ops = *ops_;
    stream_.forward(
        ops, ctx, layers_,
        [&](const DecoderLayer& layer, const Tensor& normed, const Tensor& out) {
          const Tensor selected = layer.indexer ? layer.indexer->select(ops, ctx, normed, dsa_scratch_) : Tensor();
          if (layer.gqa) {
            layer.gqa->forward(ops, ctx, normed, gqa_scratch_, out, selected);
          } else if (layer.mla_lite) {
            layer.mla_lite->forward(ops, ctx, normed, mla_lite_scratch_, out, selected);
          } else {
            layer.mla->forward(ops, ctx, normed, mla_scratch_, out);
          }
        },
        [&](const DecoderLayer& layer, const Tensor& normed, const Tensor& out) {
          if (layer.moe) {
            layer.moe->forward(ops, normed, moe_scratch_, out);
          } else {
            layer.mlp->forward(ops, normed, mlp_scratch_, out);
          }
        },
        logits);
  }

  // A [positions, 2 x frequencies] cos|sin table on the device, kept in `table`, as the rope op reads it.
  backend::RopeParams upload_rope(const RopeFrequencies& f, int64_t positions, bool interleaved,
                                  backend::Buffer& table) {
    const int32_t dim = int32_t(2 * f.inv_freq.size());
    const std::vector<float> host = rope_cos_sin_table(f, positions);
    table = ops_->alloc(DType::kF32, {positions, dim});
    ops_->copy_from_host(table.view, host.data());
    return {table.view, dim, interleaved};
  }

  // MLA-lite's RoPE over its kept frequencies only: the model's table restricted to them.
  backend::RopeParams mla_lite_rope(const RopeFrequencies& model_freqs, int64_t positions) {
    RopeFrequencies kept = model_freqs;
    kept.inv_freq.clear();
    for (const int32_t f : mla_lite_.rope_freqs) kept.inv_freq.push_back(model_freqs.inv_freq[size_t(f)]);
    return upload_rope(kept, positions, config_.rope.interleaved, mla_lite_rope_table_);
  }

  // DSA-lite's indexer RoPE: the model's theta over the indexer's rotated features, with no scaling rule.
  Expected<backend::RopeParams> dsa_index_rope(int64_t positions) {
    const weights::RopeConfig plain{.theta = config_.rope.theta};
    DRIFT_ASSIGN_OR_RETURN(RopeFrequencies f, rope_frequencies(plain, config_.retrofit->dsa_lite->index_rope, positions));
    return upload_rope(f, positions, false, dsa_rope_table_);
  }

  Status set_hidden_taps(std::span<const int32_t> layers) override {
    return stream_.set_taps(layers, config_.num_layers);
  }
  Tensor hidden_taps() const override { return stream_.taps(); }
  Tensor token_embedding() const override { return stream_.embedding(); }

 private:
  Expected<DecoderLayer> load_layer(WeightLoader& loader, size_t i) {
    const auto& c = config_;
    const LayerKind& kind = plan_.layers[i];
    const std::string p = fmt::format("model.layers.{}", i);
    DecoderLayer layer;
    DRIFT_RETURN_IF_ERROR(DecoderStream::load_layer_norms(loader, p, c, layer));
    if (kind.attention == AttentionKind::kMla) {
      MlaSpec spec = mla_;
      spec.kv_group = kind.kv_group;
      DRIFT_ASSIGN_OR_RETURN(layer.mla, MlaAttention::load(loader, p + ".self_attn", spec));
    } else if (kind.attention == AttentionKind::kMlaLite) {
      MlaLiteSpec spec = mla_lite_;
      spec.kv_group = kind.kv_group;
      DRIFT_ASSIGN_OR_RETURN(layer.mla_lite, MlaLiteAttention::load(loader, p + ".self_attn", spec));
    } else {
      GqaAttentionSpec spec = gqa_;
      spec.sliding_window = kind.sliding_window;
      spec.kv_group = kind.kv_group;
      DRIFT_ASSIGN_OR_RETURN(layer.gqa, GqaAttention::load(loader, p + ".self_attn", spec));
    }
    if (kind.index_group >= 0) {
      DsaIndexerSpec spec = dsa_;
      spec.kv_group = kind.index_group;
      DRIFT_ASSIGN_OR_RETURN(layer.indexer, DsaIndexer::load(loader, p + ".self_attn", spec));
    }
    if (kind.feed_forward == FeedForwardKind::kMoe) {
      if (family_.load_moe == nullptr)
        return unsupported(fmt::format("{}: layer {} is a mixture of experts, which this family does not load",
                                       c.architecture, i));
      DRIFT_ASSIGN_OR_RETURN(layer.moe, family_.load_moe(loader, p + ".mlp", moe_, c));
    } else {
      DRIFT_ASSIGN_OR_RETURN(layer.mlp, GatedMlp::load(loader, p + ".mlp", c.hidden_size, c.intermediate_size, c.mlp_bias));
    }
    return layer;
  }

  LayerPlan plan_;
  const DecoderFamily& family_;
  backend::Ops* ops_ = nullptr;
  TensorSplit split_;  // this rank's share of heads, widths and vocabulary
  backend::Buffer rope_table_;
  GqaAttentionSpec gqa_;
  MlaSpec mla_;
  MlaLiteSpec mla_lite_;
  backend::Buffer mla_lite_rope_table_;  // [positions, rope_dim]: the kept frequencies' cos|sin
  DsaIndexerSpec dsa_;
  backend::Buffer dsa_rope_table_;  // [positions, index_rope] when the indexer rotates
  MoeSpec moe_;
  std::vector<DecoderLayer> layers_;
  DecoderStream stream_;  // embedding, residual stream, final norm, LM head, taps
  AttentionScratch gqa_scratch_;
  MlaScratch mla_scratch_;
  MlaLiteScratch mla_lite_scratch_;
  DsaScratch dsa_scratch_;
  GatedMlpScratch mlp_scratch_;
  MoeScratch moe_scratch_;
  int32_t max_tokens_ = 0;
  backend::Buffer move_scratch_;  // [max_tokens * widest cache row] in the KV dtype: rows move_kv() holds
};

}  // namespace

Expected<std::unique_ptr<Model>> build_decoder(const weights::ModelConfig& config, WeightLoader& loader,
                                               const DecoderFamily& family) {
  if (family.check != nullptr) DRIFT_RETURN_IF_ERROR(family.check(config));
  LayerPlan plan = plan_layers(config);
  DRIFT_RETURN_IF_ERROR(check_tensor_split(config, plan, loader.ops().world_size()));
  auto model = std::make_unique<DecoderModel>(config, std::move(plan), family);
  DRIFT_RETURN_IF_ERROR(model->load(loader));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace drift::model
