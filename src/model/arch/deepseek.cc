// DeepSeek family: DeepSeek-V2 (-Lite), DeepSeek-V3 and Youtu-LLM. Pre-norm decoder layers of absorbed MLA
// attention and a SwiGLU feed-forward that is dense in the first first_k_dense_replace layers (and in every
// layer of Youtu) and a mixture of experts with shared experts after. The members differ in config fields
// only (a compressed or plain query, softmax or sigmoid routing, group limits, the correction bias), which
// the shared decoder reads; this file says how their checkpoints lay out the experts.
#include <fmt/format.h>

#include "model/decoder_model.h"

namespace drift::model {

namespace {

Status check_deepseek(const weights::ModelConfig& c) {
  if (!c.mla) return invalid_argument(fmt::format("{}: config has no kv_lora_rank (MLA fields)", c.architecture));
  if (c.hidden_act != "silu")
    return unsupported(fmt::format("hidden_act '{}' is not supported for {} (silu is)", c.hidden_act, c.architecture));
  return Status::Ok();
}

// Tensors of each expert (`per_expert` of them, expert by expert in `names`) stacked along dimension 0 for
// the experts this rank holds, each tensor's `shard` part; the other ranks' experts are skipped in their turn.
Expected<backend::Buffer> load_expert_stack(WeightLoader& loader, const MoeSpec& spec,
                                            const std::vector<std::string>& names,
                                            const std::vector<std::vector<int64_t>>& shapes, size_t per_expert,
                                            const Shard& shard) {
  const size_t first = size_t(spec.first_expert()) * per_expert;
  const size_t end = first + size_t(spec.local_experts()) * per_expert;
  for (size_t i = 0; i < first; ++i) loader.skip(names[i], shapes[i]);
  auto held = loader.load_stacked({names.begin() + ptrdiff_t(first), names.begin() + ptrdiff_t(end)},
                                  {shapes.begin() + ptrdiff_t(first), shapes.begin() + ptrdiff_t(end)}, shard);
  for (size_t i = end; i < names.size(); ++i) loader.skip(names[i], shapes[i]);
  return held;
}

// Checkpoints keep one gate/up/down triple per expert; they are stacked into [E, 2F, H] and [E, H, F].
Expected<Moe> load_deepseek_moe(WeightLoader& loader, const std::string& prefix, const MoeSpec& spec,
                                const weights::ModelConfig& c) {
  MoeWeights w;
  DRIFT_ASSIGN_OR_RETURN(w.router, Linear::load(loader, prefix + ".gate", spec.num_experts, spec.hidden, false));
  if (c.moe->topk_method == weights::MoeConfig::kNoauxTc) {
    // fp32 on every backend (MoeRouteParams::correction_bias): the bias shifts sigmoid scores near 1, where
    // bf16 would round away the differences that pick the experts.
    DRIFT_ASSIGN_OR_RETURN(const std::vector<float> bias,
                           loader.read_host(prefix + ".gate.e_score_correction_bias", {spec.num_experts}));
    w.correction_bias = loader.ops().alloc(DType::kF32, {spec.num_experts});
    loader.ops().copy_from_host(w.correction_bias.view, bias.data());
  }
  // A width split reads every expert's share of gate and up rows and of down columns; placed experts, the
  // rank's own whole.
  const Shard rows = spec.width_shard(0), cols = spec.width_shard(1);
  std::vector<std::string> gate_up_names, down_names;
  std::vector<std::vector<int64_t>> gate_up_shapes, down_shapes;
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    const std::string expert = fmt::format("{}.experts.{}", prefix, e);
    gate_up_names.insert(gate_up_names.end(), {expert + ".gate_proj.weight", expert + ".up_proj.weight"});
    gate_up_shapes.insert(gate_up_shapes.end(), {{spec.ffn, spec.hidden}, {spec.ffn, spec.hidden}});
    down_names.push_back(expert + ".down_proj.weight");
    down_shapes.push_back({spec.hidden, spec.ffn});
  }
  const int64_t experts = spec.local_experts(), f = spec.local_ffn();
  DRIFT_ASSIGN_OR_RETURN(w.w_gate_up, load_expert_stack(loader, spec, gate_up_names, gate_up_shapes, 2, rows));
  w.w_gate_up.view = w.w_gate_up.view.view({experts, 2 * f, spec.hidden});
  DRIFT_ASSIGN_OR_RETURN(w.w_down, load_expert_stack(loader, spec, down_names, down_shapes, 1, cols));
  w.w_down.view = w.w_down.view.view({experts, spec.hidden, f});
  if (spec.shared_ffn > 0) {
    DRIFT_ASSIGN_OR_RETURN(w.shared,
                           GatedMlp::load(loader, prefix + ".shared_experts", spec.hidden, spec.shared_ffn, false));
  }
  return Moe(spec, std::move(w));
}

const DecoderFamily kDeepseek{.check = &check_deepseek, .load_moe = &load_deepseek_moe};

}  // namespace

Expected<std::unique_ptr<Model>> build_deepseek(const weights::ModelConfig& config, WeightLoader& loader) {
  return build_decoder(config, loader, kDeepseek);
}

}  // namespace drift::model
