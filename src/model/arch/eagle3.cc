// The EAGLE-3 head as a model (eagle3.h): its weights, its one-layer paged cache, its step buffers and
// the forward of one step. Loading folders and checking them against the target is eagle3_load.cc.
#include <cstddef>
#include <optional>
#include <vector>

#include "base/check.h"
#include "model/arch/eagle3_build.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/rope.h"

namespace drift::model {

namespace {

constexpr int kNumTaps = 3;  // low, mid, high

class Eagle3Model final : public Eagle3Head {
 public:
  Eagle3Model(const weights::ModelConfig& config, const Eagle3Config& eagle, std::vector<int32_t> draft_to_target)
      : Eagle3Head(config, eagle), d2t_(std::move(draft_to_target)) {}

  Status load(WeightLoader& loader, const Eagle3Weights& source, const Model& target) {
    const weights::ModelConfig& c = config_;
    const int64_t h = c.hidden_size, features = kNumTaps * eagle_.target_hidden;
    ops_ = &loader.ops();
    DRIFT_RETURN_IF_ERROR(load_rope());
    if (source.own_embedding) {
      DRIFT_ASSIGN_OR_RETURN(own_embedding_, loader.load("embed_tokens.weight", {target.vocab_size(), h}));
      embedding_ = own_embedding_.view;
    } else {
      embedding_ = target.token_embedding();  // the caller checked it is [V, H]
    }
    if (eagle_.norm_before_fc) {
      DRIFT_ASSIGN_OR_RETURN(fc_norm_, RmsNorm::load(loader, "input_norm.weight", features, c.rms_norm_eps));
    }
    DRIFT_ASSIGN_OR_RETURN(fc_, Linear::load(loader, "fc", h, features, false));
    const std::string& p = source.layer_prefix;
    DRIFT_ASSIGN_OR_RETURN(hidden_norm_, RmsNorm::load(loader, p + ".hidden_norm.weight", h, c.rms_norm_eps));
    DRIFT_ASSIGN_OR_RETURN(input_norm_, RmsNorm::load(loader, p + ".input_layernorm.weight", h, c.rms_norm_eps));
    DRIFT_ASSIGN_OR_RETURN(post_attention_norm_,
                           RmsNorm::load(loader, p + ".post_attention_layernorm.weight", h, c.rms_norm_eps));
    DRIFT_ASSIGN_OR_RETURN(attention_, GqaAttention::load(loader, p + ".self_attn", spec_));
    DRIFT_ASSIGN_OR_RETURN(mlp_, GatedMlp::load(loader, p + ".mlp", h, c.intermediate_size, false));
    DRIFT_ASSIGN_OR_RETURN(final_norm_, RmsNorm::load(loader, "norm.weight", h, c.rms_norm_eps));
    DRIFT_ASSIGN_OR_RETURN(lm_head_, Linear::load(loader, "lm_head", c.vocab_size, h, false));
    num_parameters_ = loader.num_parameters();
    return Status::Ok();
  }

  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const override {
    core::KvSpec spec;
    spec.name = "eagle3";
    spec.kind = core::KvKind::kGqa;
    spec.kv_heads = int32_t(config_.num_kv_heads);
    spec.head_dim = int32_t(config_.head_dim);
    spec.dtype = kv_dtype;
    spec.num_layers = 1;
    return {spec};
  }

  void allocate_kv_cache(std::span<const int32_t> num_blocks, int32_t block_size, DType kv_dtype) override {
    DRIFT_CHECK_EQ(num_blocks.size(), size_t(1));
    attention_.allocate_cache(*ops_, num_blocks[0], block_size, kv_dtype);
    attention_.zero_cache(*ops_);
  }

  void allocate_workspace(int32_t max_tokens, int32_t max_logits) override {
    backend::Ops& ops = *ops_;
    const DType t = ops.compute_dtype();
    const int64_t h = config_.hidden_size, ht = eagle_.target_hidden;
    const auto rows = [&](int64_t width) { return ops.alloc(t, {max_tokens, width}); };
    input_hidden_ = rows(h);
    output_hidden_ = rows(h);
    embedded_ = rows(h);
    normed_ = rows(h);
    hidden_normed_ = rows(h);
    joined_ = rows(2 * h);
    mid_ = rows(h);
    picked_ = ops.alloc(t, {max_logits, h});
    picked_normed_ = ops.alloc(t, {max_logits, h});
    tap_a_ = rows(ht);
    tap_b_ = rows(ht);
    tap_pair_ = rows(2 * ht);
    features_ = rows(kNumTaps * ht);
    if (fc_norm_) features_normed_ = rows(kNumTaps * ht);
    attention_scratch_ = AttentionScratch::allocate(ops, max_tokens, spec_);
    mlp_scratch_ = GatedMlp::allocate_scratch(ops, max_tokens, config_.intermediate_size);
    // Rows the engine has not written yet (a padded step's) must read as numbers, not as NaN.
    backend::zero_fill(ops, input_hidden_.view);
  }

  void forward(const ForwardContext& ctx, const Tensor& logits) override {
    backend::Ops& ops = *ops_;
    const int64_t n = ctx.num_tokens;
    const auto rows = [n](const backend::Buffer& b) { return b.view.slice(0, n); };
    const Tensor hidden = rows(input_hidden_), out = rows(output_hidden_), mid = rows(mid_), joined = rows(joined_);
    const Tensor embedded = rows(embedded_), normed = rows(normed_), hidden_normed = rows(hidden_normed_);
    ops.embedding(ctx.token_ids, embedding_, embedded);
    input_norm_.forward(ops, embedded, normed);
    hidden_norm_.forward(ops, hidden, hidden_normed);
    ops.concat(normed, hidden_normed, joined);  // the embedding first, as SafeAILab's midlayer joins them
    // The embedding is dead once joined: its rows take the attention output.
    attention_.forward(ops, ctx, joined, attention_scratch_, embedded);
    ops.add(eagle_.norm_before_residual ? hidden_normed : hidden, embedded, mid);
    post_attention_norm_.forward(ops, mid, normed);
    // The residual has been read: its rows take the MLP output.
    mlp_.forward(ops, normed, mlp_scratch_, hidden_normed);
    ops.add(mid, hidden_normed, out);
    const Tensor picked = picked_.view.slice(0, ctx.num_logits), picked_normed = picked_normed_.view.slice(0, ctx.num_logits);
    ops.gather_rows(out, ctx.logits_rows, picked);
    final_norm_.forward(ops, picked, picked_normed);
    lm_head_.forward(ops, picked_normed, logits);
  }

  Tensor token_embedding() const override { return embedding_; }
  Tensor input_hidden() const override { return input_hidden_.view; }
  Tensor output_hidden() const override { return output_hidden_.view; }
  std::span<const int32_t> draft_to_target() const override { return d2t_; }

  void fuse_taps(const Tensor& taps, const Tensor& rows, const Tensor& out) override {
    backend::Ops& ops = *ops_;
    const int64_t r = rows.size(0), ht = eagle_.target_hidden;
    DRIFT_CHECK_EQ(taps.ndim, 3);
    DRIFT_CHECK_EQ(taps.size(0), int64_t(kNumTaps));
    DRIFT_CHECK_EQ(taps.size(2), ht);
    DRIFT_CHECK_EQ(out.size(0), r);
    DRIFT_CHECK_EQ(out.size(1), config_.hidden_size);
    DRIFT_CHECK_LE(r, features_.view.size(0));
    const int64_t max_rows = taps.size(1);
    const size_t tap_bytes = size_t(max_rows * ht) * dtype_size(taps.dtype);
    const auto tap = [&](int j) {
      return Tensor(static_cast<char*>(taps.data) + size_t(j) * tap_bytes, taps.dtype, {max_rows, ht}, taps.device);
    };
    const Tensor a = tap_a_.view.slice(0, r), b = tap_b_.view.slice(0, r), pair = tap_pair_.view.slice(0, r);
    const Tensor features = features_.view.slice(0, r);
    ops.gather_rows(tap(0), rows, a);
    ops.gather_rows(tap(1), rows, b);
    ops.concat(a, b, pair);
    ops.gather_rows(tap(2), rows, a);
    ops.concat(pair, a, features);
    if (!fc_norm_) {
      fc_.forward(ops, features, out);
      return;
    }
    const Tensor normed = features_normed_.view.slice(0, r);
    fc_norm_->forward(ops, features, normed);
    fc_.forward(ops, normed, out);
  }

 private:
  // Llama rotate-half RoPE from the head's own rope keys, over the positions the caller sized.
  Status load_rope() {
    const weights::ModelConfig& c = config_;
    DRIFT_ASSIGN_OR_RETURN(RopeFrequencies freqs, rope_frequencies(c.rope, c.rope.rotary_dim, c.max_position_embeddings));
    const std::vector<float> table = rope_cos_sin_table(freqs, c.rope_positions);
    rope_table_ = ops_->alloc(DType::kF32, {c.rope_positions, c.rope.rotary_dim});
    ops_->copy_from_host(rope_table_.view, table.data());
    ops_->synchronize();  // `table` is freed on return
    spec_ = {.hidden = 2 * c.hidden_size, .num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads,
             .head_dim = c.head_dim, .output_hidden = c.hidden_size, .norm_eps = c.rms_norm_eps,
             .rope = {rope_table_.view, int32_t(c.rope.rotary_dim), false}};
    return Status::Ok();
  }

  backend::Ops* ops_ = nullptr;
  std::vector<int32_t> d2t_;  // [Vd] target ids
  backend::Buffer rope_table_;
  GqaAttentionSpec spec_;
  backend::Buffer own_embedding_;  // [V, H] when the checkpoint has one
  Tensor embedding_;               // own_embedding_ or the target's table
  std::optional<RmsNorm> fc_norm_;  // norm_before_fc: [3 * Ht]
  Linear fc_;                       // [H, 3 * Ht]
  RmsNorm hidden_norm_, input_norm_, post_attention_norm_, final_norm_;
  GqaAttention attention_;  // [2H] -> [H]
  GatedMlp mlp_;
  Linear lm_head_;  // [Vd, H]

  // Step buffers, [max_tokens, width] unless said. embedded_ later holds the attention output and
  // hidden_normed_ the MLP output (see forward()).
  backend::Buffer input_hidden_, output_hidden_, embedded_, normed_, hidden_normed_, mid_;
  backend::Buffer joined_;                 // [max_tokens, 2H]
  backend::Buffer picked_, picked_normed_;  // [max_logits, H]
  backend::Buffer tap_a_, tap_b_, tap_pair_, features_, features_normed_;  // fuse_taps: Ht, Ht, 2Ht, 3Ht, 3Ht
  AttentionScratch attention_scratch_;
  GatedMlpScratch mlp_scratch_;
};

}  // namespace

Expected<std::unique_ptr<Eagle3Head>> build_eagle3_head(const weights::ModelConfig& config, const Eagle3Config& eagle,
                                                        Eagle3Weights source, const Model& target,
                                                        WeightLoader& loader) {
  auto head = std::make_unique<Eagle3Model>(config, eagle, std::move(source.draft_to_target));
  DRIFT_RETURN_IF_ERROR(head->load(loader, source, target));
  return std::unique_ptr<Eagle3Head>(std::move(head));
}

}  // namespace drift::model
