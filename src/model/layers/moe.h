// Mixture-of-experts feed-forward block (DeepSeek-V2/V3, GPT-OSS): router logits, top-k routing, the routed
// experts, and DeepSeek's always-on shared experts added on top. The families differ in how checkpoints
// name and lay out these weights; each arch file translates its checkpoint into MoeWeights.
#pragma once

#include <optional>

#include "model/layers/gqa_attention.h"
#include "model/layers/linear.h"
#include "weights/model_config.h"

namespace drift::model {

struct MoeSpec {
  int64_t hidden = 0;
  int64_t ffn = 0;  // per routed expert, whole (a rank computes local_ffn() of it)
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t shared_ffn = 0;           // DeepSeek: moe_intermediate_size * n_shared_experts; 0 = no shared experts
  backend::MoeRouteParams routing;  // scoring, groups, renormalisation, scale; its tensors are set per step
  float swiglu_limit = 0.0f;        // 0: silu(gate) * up; GPT-OSS: 7 with alpha 1.702
  float swiglu_alpha = 1.702f;
  bool mxfp4 = false;               // expert matrices kept as stored in MXFP4 (moe_spec says when)
  // Tensor parallelism: every expert's (and the shared experts') intermediate width is split over the
  // ranks (gate/up rows, down columns); the block's output is this rank's partial sums, all-reduced once after it
  // by the decoder stream.
  TensorSplit split;
  // Expert parallelism (weights::MoeConfig::expert_parallel): rank r holds the routed experts
  // [r * E / N, (r + 1) * E / N) whole instead of a 1/N width of each; the shared experts stay split.
  bool expert_parallel = false;
  // The backend's expert kernels take widths that are multiples of this (Ops::moe_width_multiple); a
  // width split's share that is not one is padded with zero columns (kernel_ffn), which adds nothing.
  int64_t width_multiple = 1;

  bool places_experts() const { return expert_parallel && split.world > 1; }
  // Routed experts this rank holds, and the first one's id.
  int64_t local_experts() const { return places_experts() ? split.part(num_experts) : num_experts; }
  int64_t first_expert() const { return places_experts() ? split.rank * local_experts() : 0; }
  int64_t local_ffn() const { return places_experts() ? ffn : split.part(ffn); }
  // The width the expert kernels see: local_ffn() padded up to width_multiple under a width split (placed
  // experts keep theirs whole, and a backend that cannot take it says so).
  int64_t kernel_ffn() const {
    if (places_experts()) return local_ffn();
    return (local_ffn() + width_multiple - 1) / width_multiple * width_multiple;
  }
  int64_t local_shared_ffn() const { return split.part(shared_ffn); }
  // This rank's share of an expert tensor's width along `width_dim`: none for placed experts (held whole)
  // or on one rank.
  Shard width_shard(int32_t width_dim) const {
    return places_experts() || split.world == 1 ? Shard{} : split.along(width_dim);
  }
  // This rank's experts along `expert_dim` of a tensor of every routed expert: all of them unless placed.
  Shard placed_shard(int32_t expert_dim) const { return places_experts() ? split.along(expert_dim) : Shard{}; }
  // This rank's part of a tensor of every routed expert: its experts along `expert_dim` when experts are
  // placed, else its share of the width.
  Shard expert_shard(int32_t expert_dim, int32_t width_dim) const {
    return places_experts() ? split.along(expert_dim) : width_shard(width_dim);
  }
  // Gate/up rows of this rank as MoeWeights lays them out (gate rows first): [E, 2, F].
  Shard gate_up_shard() const { return expert_shard(0, 2); }
};

// What the MoE layers of `spec` ask of a backend.
backend::MoeShape moe_shape(const MoeSpec& spec);

// The spec a config's MoE section describes on `ops`: DeepSeek's shared experts and routing, GPT-OSS's
// clamped SwiGLU, and whether the experts stay MXFP4 (the checkpoint stores them so and a kernel of `ops`
// reads them as stored; otherwise the loader decodes them to the compute dtype). The config must have a
// MoE section.
MoeSpec moe_spec(const weights::ModelConfig& config, const backend::Ops& ops);
// The routing rule a config's MoE section describes (DeepSeek's topk_method names it: greedy,
// group_limited_greedy with a group's best score, noaux_tc with the sum of a group's best two).
backend::MoeRouteParams moe_routing(const weights::MoeConfig& moe);
// Checks that the routing can pick top_k experts from the kept groups, naming the config fields otherwise,
// and that a width split of MXFP4 experts falls between their blocks.
Status check_moe_spec(const MoeSpec& spec);

// E below: the experts this rank holds (MoeSpec::local_experts), F: its share of each expert's width
// (MoeSpec::kernel_ffn: local_ffn with any padding).
struct MoeWeights {
  Linear router;                    // [E, H], bias [E] for GPT-OSS
  backend::Buffer correction_bias;  // [E] DeepSeek-V3 e_score_correction_bias, else empty
  backend::Buffer w_gate_up;        // [E, 2F, H]: the F gate rows then the F up rows, or alternating (interleaved)
  backend::Buffer b_gate_up;        // [E, 2F] or empty, in the row order of w_gate_up
  backend::Buffer w_down;           // [E, H, F]
  backend::Buffer b_down;           // [E, H] or empty; rank 0's only under a width split (added once)
  // MXFP4 (MoeSpec::mxfp4): w_gate_up [E, 2F, H / 2] and w_down [E, H, F / 2] hold U8 codes, these the scales.
  backend::Buffer w_gate_up_scales;  // [E, 2F, H / 32] U8
  backend::Buffer w_down_scales;     // [E, H, F / 32] U8
  bool gate_up_interleaved = false;  // rows 2j, 2j + 1 are gate j, up j (as GPT-OSS stores them)
  std::optional<GatedMlp> shared;   // DeepSeek's shared experts, one SwiGLU MLP of width shared_ffn
};

struct MoeScratch {
  backend::Buffer logits;        // [max_tokens, E]
  backend::Buffer topk_ids;      // [max_tokens, top_k] int32
  backend::Buffer topk_weights;  // [max_tokens, top_k]
  backend::Buffer shared_out;    // [max_tokens, hidden], when there are shared experts
  backend::Buffer workspace;     // the backend's moe_experts scratch (bytes), when it asks for one
  GatedMlpScratch shared;

  static MoeScratch allocate(backend::Ops& ops, int64_t max_tokens, const MoeSpec& spec);
};

class Moe {
 public:
  Moe() = default;
  Moe(const MoeSpec& spec, MoeWeights weights);
  // x, out: [n, hidden]
  void forward(backend::Ops& ops, const Tensor& x, MoeScratch& scratch, const Tensor& out) const;
  const MoeSpec& spec() const { return spec_; }

 private:
  backend::MoeRouteParams route(backend::Ops& ops, const Tensor& x, MoeScratch& scratch, int64_t n) const;
  // out = `add` (the shared experts' output, or undefined: zero) + this rank's experts' weighted outputs for
  // every token (nothing where it holds none of the token's).
  void routed_experts(backend::Ops& ops, const Tensor& x, const backend::MoeRouteParams& route,
                      MoeScratch& scratch, const Tensor& add, const Tensor& out) const;

  MoeSpec spec_;
  MoeWeights w_;
};

}  // namespace drift::model
