// EAGLE-3 head folders (and random heads) -> Eagle3Head: the head's config.json read in one convention,
// checked against its target and the backend before any weight is read, and d2t turned into target ids.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "model/arch/eagle3_build.h"
#include "weights/json_fields.h"
#include "weights/weight_store.h"

namespace drift::model {

namespace {

using nlohmann::json;

constexpr std::string_view kArchitectures[] = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM",
                                               "GptOssForCausalLMEagle3"};
constexpr int kNumTaps = 3;

// EAGLE's reference capture: the inputs of layers 2, L/2 and L-3, kept inside [0, L] for small targets.
std::vector<int32_t> default_capture_layers(int64_t num_layers) {
  std::vector<int32_t> layers;
  for (int64_t l : {int64_t(2), num_layers / 2, num_layers - 3})
    layers.push_back(int32_t(std::clamp<int64_t>(l, 0, num_layers)));
  return layers;
}

Expected<json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(fmt::format("{}: cannot open", path));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    return data_loss(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
}

// The eagle keys sit at the top level (SpecForge) or inside eagle_config (ModelOpt); the top level wins.
struct EagleFields {
  weights::JsonFields top, inner;
  const weights::JsonFields& holding(std::string_view key) const { return top.has(key) ? top : inner; }
  Expected<bool> flag(std::string_view key) const { return holding(key).bool_or(key, false); }
};

// eagle_aux_hidden_state_layer_ids (output-of-layer ids) as input-of-layer ids; absent: the default.
Expected<std::vector<int32_t>> capture_layers(const EagleFields& f, int64_t target_layers) {
  constexpr std::string_view kKey = "eagle_aux_hidden_state_layer_ids";
  const weights::JsonFields& fields = f.holding(kKey);
  const json* ids = fields.find(kKey);
  if (ids == nullptr) return default_capture_layers(target_layers);
  if (!ids->is_array()) return fields.type_error(kKey, "a list of layer ids");
  if (ids->size() != kNumTaps)
    return fields.invalid(kKey, fmt::format("has {} ids; an EAGLE-3 head fuses {} captured states", ids->size(), kNumTaps));
  std::vector<int32_t> layers;
  for (const json& id : *ids) {
    if (!id.is_number_integer()) return fields.type_error(kKey, "a list of layer ids");
    const int64_t layer = id.get<int64_t>();
    // Output-of-layer ids; -1 is the embeddings' output (small targets, as the eagle3_llama fixture has).
    if (layer < -1 || layer >= target_layers)
      return fields.invalid(kKey, fmt::format("holds {}: the target's layers are -1..{} (output-of-layer ids, -1: the "
                                              "embeddings)", layer, target_layers - 1));
    layers.push_back(int32_t(layer + 1));
  }
  return layers;
}

Expected<Eagle3Config> parse_eagle3_config(const std::string& path, const weights::ModelConfig& c,
                                           int64_t target_layers) {
  DRIFT_ASSIGN_OR_RETURN(const json config, read_json(path));
  static const json kEmpty = json::object();
  const json* inner = config.contains("eagle_config") ? &config["eagle_config"] : &kEmpty;
  if (!inner->is_object()) inner = &kEmpty;
  const EagleFields f{weights::JsonFields(config, path), weights::JsonFields(*inner, path, "eagle_config.")};
  Eagle3Config e;
  DRIFT_ASSIGN_OR_RETURN(e.target_hidden, f.top.int_or("target_hidden_size", c.hidden_size));
  DRIFT_ASSIGN_OR_RETURN(e.draft_vocab, f.top.int_or("draft_vocab_size", c.vocab_size));
  DRIFT_ASSIGN_OR_RETURN(e.capture_layers, capture_layers(f, target_layers));
  DRIFT_ASSIGN_OR_RETURN(e.norm_before_residual, f.flag("norm_before_residual"));
  DRIFT_ASSIGN_OR_RETURN(e.norm_before_fc, f.flag("norm_before_fc"));
  // EAGLE 3.1's variants change the forward; running one as plain EAGLE-3 would draft garbage quietly.
  for (std::string_view variant : {"fc_norm", "norm_output"}) {
    DRIFT_ASSIGN_OR_RETURN(const bool on, f.flag(variant));
    if (on) return unsupported(fmt::format("{}: field '{}' (EAGLE 3.1) is not supported", path, variant));
  }
  return e;
}

// What the head's Llama keys must say for the one layer this file runs.
Status check_head_config(const weights::ModelConfig& c, const std::string& source) {
  const auto refuse = [&](std::string_view field, const std::string& why) {
    return unsupported(fmt::format("{}: field '{}' {}", source, field, why));
  };
  if (c.num_layers != 1) return refuse("num_hidden_layers", fmt::format("is {}; an EAGLE-3 head has 1 layer", c.num_layers));
  if (c.attention_bias) return refuse("attention_bias", "is true; EAGLE-3 projections have no bias");
  if (c.mlp_bias) return refuse("mlp_bias", "is true; EAGLE-3 projections have no bias");
  if (c.hidden_act != "silu") return refuse("hidden_act", fmt::format("is '{}'; the head's MLP is SwiGLU (silu)", c.hidden_act));
  // Expert counts a converter copied from a MoE target are ignored (the head's MLP is dense whatever they
  // say), but MLA dims would redefine head_dim.
  if (c.mla) return refuse("kv_lora_rank", "is set; an EAGLE-3 head is one GQA layer");
  return Status::Ok();
}

// That the head reads the target's states and speaks its vocabulary.
Status check_fits_target(const weights::ModelConfig& c, const Eagle3Config& e, const Model& target,
                         const std::string& source) {
  const weights::ModelConfig& t = target.config();
  if (c.vocab_size != t.vocab_size)
    return invalid_argument(fmt::format("{}: field 'vocab_size' is {}, but the target's vocabulary has {} tokens", source,
                                        c.vocab_size, t.vocab_size));
  if (e.target_hidden != t.hidden_size)
    return invalid_argument(fmt::format("{}: field 'target_hidden_size' is {}, but the target's hidden size is {}", source,
                                        e.target_hidden, t.hidden_size));
  if (e.draft_vocab <= 0 || e.draft_vocab > t.vocab_size)
    return invalid_argument(fmt::format("{}: field 'draft_vocab_size' is {}, expected 1..{} (the target's vocabulary)",
                                        source, e.draft_vocab, t.vocab_size));
  if (e.capture_layers.size() != size_t(kNumTaps))
    return invalid_argument(fmt::format("{}: {} capture layers, expected {}", source, e.capture_layers.size(), kNumTaps));
  for (int32_t layer : e.capture_layers)
    if (layer < 0 || layer > t.num_layers)
      return invalid_argument(fmt::format("{}: capture layer {} (input-of-layer id) is outside the target's 0..{}", source,
                                          layer, t.num_layers));
  return Status::Ok();
}

// The embedding the head reads: its own, or the target's table of the same width.
Status check_embedding(const weights::ModelConfig& c, bool own_embedding, const Model& target, const std::string& source) {
  if (own_embedding) return Status::Ok();
  const Tensor table = target.token_embedding();
  if (!table.defined())
    return invalid_argument(fmt::format("{}: the head has no 'embed_tokens.weight' and the target ({}) lends none", source,
                                        target.config().architecture));
  if (table.ndim != 2 || table.size(0) != c.vocab_size || table.size(1) != c.hidden_size)
    return invalid_argument(fmt::format("{}: the head has no 'embed_tokens.weight' and the target's embedding is {}, "
                                        "expected [{}, {}] (vocab_size, hidden_size)",
                                        source, table.describe(), c.vocab_size, c.hidden_size));
  return Status::Ok();
}

Status check_backend_runs(const weights::ModelConfig& c, const backend::Ops& ops, DType kv_dtype) {
  if (ops.world_size() != 1)
    return unsupported(fmt::format("EAGLE-3 heads run on one rank; the {} backend has {}", ops.name(), ops.world_size()));
  const backend::AttentionShape shape{.num_heads = c.num_heads, .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                                      .head_dim_v = c.head_dim, .kv_dtype = kv_dtype};
  if (Status s = ops.supports(shape); !s.ok())
    return unsupported(fmt::format("{} cannot run on the {} backend: attention: {}", c.architecture, ops.name(), s.message()));
  return Status::Ok();
}

Expected<std::string> layer_prefix(const weights::WeightStore& store) {
  for (const char* prefix : {"midlayer", "layers.0"})
    if (store.contains(std::string(prefix) + ".self_attn.q_proj.weight")) return std::string(prefix);
  return not_found(fmt::format("{}: no EAGLE-3 decoder layer: neither 'midlayer.self_attn.q_proj.weight' nor "
                               "'layers.0.self_attn.q_proj.weight'",
                               store.dir()));
}

// Target id of each draft id: i + d2t[i]; without d2t the draft vocabulary must be the target's.
Expected<std::vector<int32_t>> read_draft_to_target(const weights::WeightStore& store, int64_t draft_vocab, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(draft_vocab));
  if (!store.contains("d2t")) {
    if (draft_vocab != vocab)
      return not_found(fmt::format("{}: no 'd2t' tensor, but the draft vocabulary ({}) is not the target's ({})",
                                   store.dir(), draft_vocab, vocab));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
    return ids;
  }
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* t, store.get("d2t", {draft_vocab}));
  if (t->dtype != DType::kI64)
    return invalid_argument(fmt::format("tensor 'd2t' in {} has dtype {}, expected I64", t->file, dtype_name(t->dtype)));
  for (int64_t i = 0; i < draft_vocab; ++i) {
    int64_t offset = 0;
    std::memcpy(&offset, t->bytes.data() + size_t(i) * sizeof(int64_t), sizeof(int64_t));
    const int64_t id = i + offset;
    if (id < 0 || id >= vocab)
      return invalid_argument(fmt::format("tensor 'd2t' in {}: d2t[{}] = {} maps draft id {} to {}, outside the target's "
                                          "vocabulary [0, {})",
                                          t->file, i, offset, i, id, vocab));
    ids[size_t(i)] = int32_t(id);
  }
  return ids;
}

// Rows of the RoPE table: the target's served positions (a head drafts as far as its target runs), at
// least the head's own max_position_embeddings.
int64_t rope_positions(const weights::ModelConfig& head, const Model& target, int64_t max_positions) {
  if (max_positions > 0) return max_positions;
  const weights::ModelConfig& t = target.config();
  return std::max(head.max_position_embeddings, t.rope_positions > 0 ? t.rope_positions : t.max_position_embeddings);
}

}  // namespace

bool is_eagle3_architecture(std::string_view architecture) {
  return std::ranges::find(kArchitectures, architecture) != std::end(kArchitectures);
}

Expected<std::unique_ptr<Eagle3Head>> load_eagle3_head(const std::string& head_dir, const Model& target,
                                                       backend::Ops& ops, const LoadOptions& options) {
  DRIFT_ASSIGN_OR_RETURN(weights::ModelConfig config, weights::load_model_config(head_dir));
  const std::string source = head_dir + "/config.json";
  if (!is_eagle3_architecture(config.architecture))
    return unsupported(fmt::format("{}: architecture '{}' is not an EAGLE-3 head (expected one of {})", source,
                                   config.architecture, fmt::join(kArchitectures, ", ")));
  DRIFT_RETURN_IF_ERROR(check_head_config(config, source));
  DRIFT_ASSIGN_OR_RETURN(const Eagle3Config eagle, parse_eagle3_config(source, config, target.config().num_layers));
  DRIFT_RETURN_IF_ERROR(check_fits_target(config, eagle, target, source));
  DRIFT_RETURN_IF_ERROR(check_backend_runs(config, ops, options.kv_dtype.value_or(ops.compute_dtype())));

  DRIFT_ASSIGN_OR_RETURN(weights::WeightStore store, weights::WeightStore::open(head_dir));
  for (const std::string& file : options.extra_weight_files) DRIFT_RETURN_IF_ERROR(store.add_file(file));
  Eagle3Weights weights;
  DRIFT_ASSIGN_OR_RETURN(weights.layer_prefix, layer_prefix(store));
  weights.own_embedding = store.contains("embed_tokens.weight");
  DRIFT_RETURN_IF_ERROR(check_embedding(config, weights.own_embedding, target, source));
  DRIFT_ASSIGN_OR_RETURN(weights.draft_to_target, read_draft_to_target(store, eagle.draft_vocab, config.vocab_size));

  config.vocab_size = eagle.draft_vocab;  // the head's logits are over the draft vocabulary
  config.rope_positions = rope_positions(config, target, options.max_positions);
  WeightLoader loader = WeightLoader::from_store(store, ops);
  if (options.progress) {
    size_t total = 0;
    for (const std::string& name : store.names()) total += (*store.get(name))->bytes.size();
    loader.set_progress(options.progress, total);
  }
  return build_eagle3_head(config, eagle, std::move(weights), target, loader);
}

Expected<std::unique_ptr<Eagle3Head>> random_eagle3_head(const Model& target, backend::Ops& ops, uint64_t seed,
                                                         Eagle3Shape shape) {
  const weights::ModelConfig& t = target.config();
  const auto or_target = [](int64_t value, int64_t fallback) { return value > 0 ? value : fallback; };
  weights::ModelConfig c;
  c.architecture = "LlamaForCausalLMEagle3";
  c.model_type = "llama";
  c.vocab_size = t.vocab_size;
  c.hidden_size = t.hidden_size;
  c.intermediate_size = or_target(shape.intermediate_size, t.intermediate_size);
  c.num_layers = 1;
  c.num_heads = or_target(shape.num_heads, t.num_heads);
  c.num_kv_heads = or_target(shape.num_kv_heads, t.num_kv_heads);
  c.head_dim = or_target(shape.head_dim, t.head_dim);
  c.max_position_embeddings = t.max_position_embeddings;
  c.rms_norm_eps = t.rms_norm_eps;
  c.rope = t.rope;  // the target's frequencies, rotating whole heads by halves as Llama does
  c.rope.rotary_dim = c.head_dim;
  c.rope.interleaved = false;
  c.layer_types = {weights::LayerAttention::kFull};
  const Eagle3Config eagle{.target_hidden = t.hidden_size,
                           .draft_vocab = or_target(shape.draft_vocab, t.vocab_size),
                           .capture_layers = shape.capture_layers.empty() ? default_capture_layers(t.num_layers)
                                                                          : shape.capture_layers,
                           .norm_before_residual = shape.norm_before_residual,
                           .norm_before_fc = shape.norm_before_fc};
  const std::string source = "random EAGLE-3 head";
  DRIFT_RETURN_IF_ERROR(check_fits_target(c, eagle, target, source));
  DRIFT_RETURN_IF_ERROR(check_embedding(c, false, target, source));
  DRIFT_RETURN_IF_ERROR(check_backend_runs(c, ops, ops.compute_dtype()));

  Eagle3Weights weights{.layer_prefix = "midlayer", .own_embedding = false, .draft_to_target = {}};
  for (int64_t i = 0; i < eagle.draft_vocab; ++i)
    weights.draft_to_target.push_back(int32_t(i * t.vocab_size / eagle.draft_vocab));
  c.vocab_size = eagle.draft_vocab;
  c.rope_positions = rope_positions(c, target, 0);
  WeightLoader loader = WeightLoader::random(seed, shape.std, ops);
  return build_eagle3_head(c, eagle, std::move(weights), target, loader);
}

}  // namespace drift::model
