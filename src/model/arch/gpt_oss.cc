// GPT-OSS: pre-norm decoder layers of GQA attention (biases, a learned sink logit per head, a sliding window
// on the layers config.layer_types marks) and a mixture of experts: top-k of the router logits, softmax over
// the chosen, experts with biases and the clamped SwiGLU. The shared decoder reads all of that from the
// config; this file says how checkpoints store the experts (MXFP4 blocks + E8M0 scales when
// quantization_config.quant_method is "mxfp4", else bf16 matrices) and that prompts are harmony.
#include <fmt/format.h>

#include <algorithm>

#include "model/decoder_model.h"
#include "weights/mxfp4.h"

namespace drift::model {

namespace {

Status check_gpt_oss(const weights::ModelConfig& c) {
  if (!c.moe) return invalid_argument(fmt::format("{}: config has no num_local_experts", c.architecture));
  if (!c.quant_method.empty() && c.quant_method != "mxfp4")
    return unsupported(fmt::format("{}: quantization_config.quant_method '{}' is not supported (mxfp4 is)",
                                   c.architecture, c.quant_method));
  return Status::Ok();
}

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

// The MXFP4 matrix "<name>_blocks" [E, rows, cols / 32, 16] + "<name>_scales" [E, rows, cols / 32] as stored,
// the codes seen as [E, rows, cols / 2]; under a split, the rank's part along the shard's dimension (0: its
// experts, 1: rows, 2: the column blocks), with any padding's zero codes and scales.
Status load_mxfp4(WeightLoader& loader, const std::string& name, int64_t experts, int64_t rows, int64_t cols,
                  const Shard& shard, backend::Buffer& codes, backend::Buffer& scales) {
  const int64_t blocks = cols / weights::kMxfp4BlockValues;
  DRIFT_ASSIGN_OR_RETURN(codes, loader.load_stored(name + "_blocks", {experts, rows, blocks, weights::kMxfp4BlockBytes},
                                                   DType::kU8, shard));
  const Tensor& c = codes.view;
  codes.view = c.view({c.size(0), c.size(1), c.size(2) * weights::kMxfp4BlockBytes});
  DRIFT_ASSIGN_OR_RETURN(scales, loader.load_stored(name + "_scales", {experts, rows, blocks}, DType::kU8, shard));
  return Status::Ok();
}

// `shard` of an expert tensor whose width along `dim` has `share` units on this rank, padded to `kernel`
// units where the kernels' width multiple asks more (MoeSpec::kernel_ffn). Zero gate/up rows with zero
// biases give zero activations through the clamped SwiGLU, and zero down columns add nothing.
Shard pad_width(Shard shard, int32_t dim, int64_t share, int64_t kernel) {
  if (kernel == share) return shard;
  if (shard.whole()) shard.dim = dim;
  shard.padded_to = kernel;
  return shard;
}

// Experts kept MXFP4 for a backend whose kernels decode them: gate and up stay interleaved as stored, so a
// rank's contiguous share of the 2F rows holds whole (gate, up) pairs.
Expected<Moe> load_gpt_oss_mxfp4_moe(WeightLoader& loader, const std::string& prefix, const MoeSpec& spec) {
  const int64_t e = spec.num_experts, h = spec.hidden, f = spec.ffn;
  const int64_t share = spec.local_ffn(), kernel = spec.kernel_ffn(), block = weights::kMxfp4BlockValues;
  const std::string experts = prefix + ".experts";
  const Shard rows = pad_width(spec.expert_shard(0, 1), 1, 2 * share, 2 * kernel);
  const Shard down_blocks = pad_width(spec.expert_shard(0, 2), 2, share / block, kernel / block);
  MoeWeights w;
  DRIFT_ASSIGN_OR_RETURN(w.router, Linear::load(loader, prefix + ".router", e, h, true));
  DRIFT_RETURN_IF_ERROR(load_mxfp4(loader, experts + ".gate_up_proj", e, 2 * f, h, rows, w.w_gate_up, w.w_gate_up_scales));
  DRIFT_RETURN_IF_ERROR(load_mxfp4(loader, experts + ".down_proj", e, h, f, down_blocks, w.w_down, w.w_down_scales));
  DRIFT_ASSIGN_OR_RETURN(w.b_gate_up, loader.load(experts + ".gate_up_proj_bias", {e, 2 * f}, rows));
  DRIFT_ASSIGN_OR_RETURN(w.b_down, loader.load(experts + ".down_proj_bias", {e, h}, spec.placed_shard(0)));
  w.gate_up_interleaved = true;
  return Moe(spec, std::move(w));
}

Expected<Moe> load_gpt_oss_moe(WeightLoader& loader, const std::string& prefix, const MoeSpec& spec,
                               const weights::ModelConfig& c) {
  if (spec.mxfp4) return load_gpt_oss_mxfp4_moe(loader, prefix, spec);
  const int64_t e = spec.num_experts, h = spec.hidden, f = spec.ffn;
  const int64_t local_e = spec.local_experts(), local_f = spec.local_ffn();
  const std::string experts = prefix + ".experts";
  MoeWeights w;
  DRIFT_ASSIGN_OR_RETURN(w.router, Linear::load(loader, prefix + ".router", e, h, true));
  std::vector<float> gate_up, down;
  if (c.quant_method == "mxfp4") {
    DRIFT_ASSIGN_OR_RETURN(gate_up, loader.read_host_mxfp4(experts + ".gate_up_proj", {e, 2 * f, h}));
    DRIFT_ASSIGN_OR_RETURN(down, loader.read_host_mxfp4(experts + ".down_proj", {e, h, f}));
  } else {
    DRIFT_ASSIGN_OR_RETURN(std::vector<float> gate_up_in_out,
                           loader.read_host(experts + ".gate_up_proj", {e, h, 2 * f}));
    DRIFT_ASSIGN_OR_RETURN(std::vector<float> down_in_out, loader.read_host(experts + ".down_proj", {e, f, h}));
    gate_up = transpose_experts(gate_up_in_out, e, h, 2 * f);
    down = transpose_experts(down_in_out, e, f, h);
  }
  // The rank's part, cut on the host from the gate-first layout: [E, 2, F, H] and down [E, H, F], along E
  // (placed experts) or F (a width split).
  DRIFT_ASSIGN_OR_RETURN(w.w_gate_up, loader.upload(shard_of(gate_first(gate_up, e, f, h), {e, 2, f, h}, spec.gate_up_shard()),
                                                    {local_e, 2 * local_f, h}));
  DRIFT_ASSIGN_OR_RETURN(w.w_down, loader.upload(shard_of(down, {e, h, f}, spec.expert_shard(0, 2)), {local_e, h, local_f}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> gate_up_bias, loader.read_host(experts + ".gate_up_proj_bias", {e, 2 * f}));
  DRIFT_ASSIGN_OR_RETURN(w.b_gate_up, loader.upload(shard_of(gate_first(gate_up_bias, e, f, 1), {e, 2, f}, spec.gate_up_shard()),
                                                    {local_e, 2 * local_f}));
  DRIFT_ASSIGN_OR_RETURN(w.b_down, loader.load(experts + ".down_proj_bias", {e, h}, spec.placed_shard(0)));
  return Moe(spec, std::move(w));
}

// Harmony ends a reply with <|return|> and a tool call with <|call|>; config.json names only <|endoftext|>.
const DecoderFamily kGptOss{.check = &check_gpt_oss,
                            .load_moe = &load_gpt_oss_moe,
                            .description = {.chat_format = ChatFormat::kHarmony, .stop_tokens = {"<|return|>", "<|call|>"}}};

}  // namespace

Expected<std::unique_ptr<Model>> build_gpt_oss(const weights::ModelConfig& config, WeightLoader& loader) {
  return build_decoder(config, loader, kGptOss);
}

}  // namespace drift::model
