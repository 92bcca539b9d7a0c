#include "weights/config_sections.h"

#include <fmt/format.h>

namespace drift::weights {

namespace {

using nlohmann::json;

Expected<RopeType> parse_rope_type(const JsonFields& p, std::string_view key, const std::string& name) {
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "dynamic") return RopeType::kDynamic;
  if (name == "llama3") return RopeType::kLlama3;
  if (name == "yarn") return RopeType::kYarn;
  return unsupported(fmt::format("{}: rope type '{}' (field '{}{}') is not supported (default, linear, dynamic, "
                                 "llama3 and yarn are)",
                                 p.source(), name, p.prefix(), key));
}

Expected<MoeConfig::Scoring> parse_scoring(const JsonFields& f, const std::string& name) {
  if (name == "softmax") return MoeConfig::kSoftmax;
  if (name == "sigmoid") return MoeConfig::kSigmoid;
  return unsupported(fmt::format("{}: scoring_func '{}' is not supported (softmax, sigmoid are)", f.source(), name));
}

Expected<MoeConfig::TopkMethod> parse_topk_method(const JsonFields& f, const std::string& name) {
  // "gready" is the misspelt default of transformers' DeepseekV2Config, so files saved from it carry it.
  if (name == "greedy" || name == "gready") return MoeConfig::kGreedy;
  if (name == "group_limited_greedy") return MoeConfig::kGroupLimitedGreedy;
  if (name == "noaux_tc") return MoeConfig::kNoauxTc;
  return unsupported(fmt::format("{}: topk_method '{}' is not supported (greedy, group_limited_greedy, noaux_tc are)",
                                 f.source(), name));
}

Status check_moe(const JsonFields& f, const MoeConfig& m, const ModelConfig& c) {
  if (m.num_experts <= 0) return f.invalid("n_routed_experts", fmt::format("must be positive, got {}", m.num_experts));
  if (m.num_experts_per_tok <= 0 || m.num_experts_per_tok > m.num_experts)
    return f.invalid("num_experts_per_tok", fmt::format("must be in [1, {}] (the expert count), got {}", m.num_experts,
                                                        m.num_experts_per_tok));
  if (m.moe_intermediate_size <= 0)
    return f.invalid("moe_intermediate_size", fmt::format("must be positive, got {}", m.moe_intermediate_size));
  if (m.num_shared_experts < 0)
    return f.invalid("n_shared_experts", fmt::format("must not be negative, got {}", m.num_shared_experts));
  if (m.first_k_dense_replace < 0 || m.first_k_dense_replace > c.num_layers)
    return f.invalid("first_k_dense_replace", fmt::format("must be in [0, {}] (the layer count), got {}", c.num_layers,
                                                          m.first_k_dense_replace));
  if (m.moe_layer_freq <= 0)
    return f.invalid("moe_layer_freq", fmt::format("must be positive, got {}", m.moe_layer_freq));
  if (m.n_group <= 0 || m.num_experts % m.n_group != 0)
    return f.invalid("n_group", fmt::format("({}) must divide the expert count ({})", m.n_group, m.num_experts));
  if (m.topk_group <= 0 || m.topk_group > m.n_group)
    return f.invalid("topk_group", fmt::format("must be in [1, {}] (n_group), got {}", m.n_group, m.topk_group));
  return Status::Ok();
}

Expected<MoeConfig> parse_deepseek_moe(const JsonFields& f, const Family& family) {
  MoeConfig m;
  DRIFT_ASSIGN_OR_RETURN(m.num_experts, f.required_int("n_routed_experts"));
  DRIFT_ASSIGN_OR_RETURN(m.num_experts_per_tok, f.required_int("num_experts_per_tok"));
  DRIFT_ASSIGN_OR_RETURN(m.moe_intermediate_size, f.required_int("moe_intermediate_size"));
  DRIFT_ASSIGN_OR_RETURN(m.num_shared_experts, f.int_or("n_shared_experts", 0));
  DRIFT_ASSIGN_OR_RETURN(m.first_k_dense_replace, f.int_or("first_k_dense_replace", 0));
  DRIFT_ASSIGN_OR_RETURN(m.moe_layer_freq, f.int_or("moe_layer_freq", 1));
  DRIFT_ASSIGN_OR_RETURN(m.n_group, f.int_or("n_group", 1));
  DRIFT_ASSIGN_OR_RETURN(m.topk_group, f.int_or("topk_group", 1));
  DRIFT_ASSIGN_OR_RETURN(m.routed_scaling_factor, f.double_or("routed_scaling_factor", 1.0));
  // DeepSeek-V3's config class has no scoring_func/topk_method fields (its modeling code is fixed to
  // sigmoid scores with noaux_tc routing) and defaults norm_topk_prob to true; V2's defaults differ.
  DRIFT_ASSIGN_OR_RETURN(m.norm_topk_prob, f.bool_or("norm_topk_prob", family.deepseek_v3));
  DRIFT_ASSIGN_OR_RETURN(std::string scoring, f.string_or("scoring_func", family.deepseek_v3 ? "sigmoid" : "softmax"));
  DRIFT_ASSIGN_OR_RETURN(m.scoring, parse_scoring(f, scoring));
  DRIFT_ASSIGN_OR_RETURN(std::string topk_method,
                         f.string_or("topk_method", family.deepseek_v3 ? "noaux_tc" : "greedy"));
  DRIFT_ASSIGN_OR_RETURN(m.topk_method, parse_topk_method(f, topk_method));
  return m;
}

// GPT-OSS (and Mixtral-style) routers take a softmax over the top-k logits, which equals a softmax over
// all experts followed by renormalising the top-k weights: scoring kSoftmax with norm_topk_prob.
Expected<MoeConfig> parse_local_experts_moe(const JsonFields& f, const ModelConfig& c) {
  MoeConfig m;
  DRIFT_ASSIGN_OR_RETURN(m.num_experts, f.required_int("num_local_experts"));
  if (f.has("num_experts_per_tok")) {
    DRIFT_ASSIGN_OR_RETURN(m.num_experts_per_tok, f.required_int("num_experts_per_tok"));
  } else if (f.has("experts_per_token")) {
    DRIFT_ASSIGN_OR_RETURN(m.num_experts_per_tok, f.required_int("experts_per_token"));
  } else {
    return f.missing("num_experts_per_tok");
  }
  m.moe_intermediate_size = c.intermediate_size;
  m.norm_topk_prob = true;
  m.scoring = MoeConfig::kSoftmax;
  m.topk_method = MoeConfig::kGreedy;
  return m;
}

Expected<LayerAttention> parse_layer_kind(const JsonFields& f, const json& item, size_t layer) {
  if (!item.is_string()) return f.type_error("layer_types", "a list of strings");
  const std::string name = item.get<std::string>();
  if (name == "full_attention") return LayerAttention::kFull;
  if (name == "sliding_attention") return LayerAttention::kSliding;
  return unsupported(fmt::format("{}: layer_types[{}] is '{}'; only full_attention and sliding_attention are supported",
                                 f.source(), layer, name));
}

}  // namespace

Family classify_family(std::string_view model_type, std::string_view architecture) {
  const auto is = [&](std::string_view type, std::string_view arch) {
    return model_type == type || (model_type.empty() && architecture == arch);
  };
  Family f;
  f.qwen2 = is("qwen2", "Qwen2ForCausalLM");
  f.qwen3 = is("qwen3", "Qwen3ForCausalLM") || is("qwen3_moe", "Qwen3MoeForCausalLM");
  f.gpt_oss = is("gpt_oss", "GptOssForCausalLM");
  f.deepseek_v2 = is("deepseek_v2", "DeepseekV2ForCausalLM");
  f.deepseek_v3 = is("deepseek_v3", "DeepseekV3ForCausalLM");
  f.youtu = is("youtu", "YoutuForCausalLM");
  return f;
}

Expected<std::optional<MlaConfig>> parse_mla(const JsonFields& f) {
  if (!f.has("kv_lora_rank")) return std::optional<MlaConfig>();
  MlaConfig m;
  // q_lora_rank null means the query is not compressed (plain q_proj).
  DRIFT_ASSIGN_OR_RETURN(m.q_lora_rank, f.int_or("q_lora_rank", 0));
  DRIFT_ASSIGN_OR_RETURN(m.kv_lora_rank, f.required_int("kv_lora_rank"));
  DRIFT_ASSIGN_OR_RETURN(m.qk_nope_head_dim, f.required_int("qk_nope_head_dim"));
  DRIFT_ASSIGN_OR_RETURN(m.qk_rope_head_dim, f.required_int("qk_rope_head_dim"));
  DRIFT_ASSIGN_OR_RETURN(m.v_head_dim, f.required_int("v_head_dim"));
  if (m.q_lora_rank < 0) return f.invalid("q_lora_rank", fmt::format("must not be negative, got {}", m.q_lora_rank));
  for (const auto& [key, value] : {std::pair<std::string_view, int64_t>{"kv_lora_rank", m.kv_lora_rank},
                                   {"qk_nope_head_dim", m.qk_nope_head_dim},
                                   {"qk_rope_head_dim", m.qk_rope_head_dim},
                                   {"v_head_dim", m.v_head_dim}})
    if (value <= 0) return f.invalid(key, fmt::format("must be positive, got {}", value));
  return std::optional<MlaConfig>(m);
}

Expected<RopeConfig> parse_rope(const JsonFields& f, const Family& family, const ModelConfig& c) {
  std::string section = "rope_parameters";
  const json* params = f.find(section);
  if (!params) {
    section = "rope_scaling";
    params = f.find(section);
  }
  if (params && !params->is_object()) return f.type_error(section, "an object");
  static const json kEmpty = json::object();
  const JsonFields p(params ? *params : kEmpty, f.source(), section + ".");
  if (params) {
    // transformers 5 may nest one parameter set per layer type (e.g. {"full_attention": {...}}).
    for (const auto& [key, value] : params->items())
      if (value.is_object())
        return unsupported(fmt::format("{}: {} per layer type ('{}') is not supported", f.source(), section, key));
  }

  RopeConfig rope;
  DRIFT_ASSIGN_OR_RETURN(std::optional<double> theta, p.optional_double("rope_theta"));
  if (!theta) {
    DRIFT_ASSIGN_OR_RETURN(theta, f.optional_double("rope_theta"));
  }
  rope.theta = theta.value_or(10000.0);
  if (!(rope.theta > 0)) return f.invalid("rope_theta", "must be positive");

  // Older hub files say "type" where transformers now writes "rope_type".
  const std::string_view type_key = p.has("rope_type") ? "rope_type" : "type";
  DRIFT_ASSIGN_OR_RETURN(std::string type_name, p.string_or(type_key, "default"));
  DRIFT_ASSIGN_OR_RETURN(rope.type, parse_rope_type(p, type_key, type_name));

  if (rope.type != RopeType::kDefault) {
    DRIFT_ASSIGN_OR_RETURN(std::optional<double> factor, p.optional_double("factor"));
    if (!factor) return p.missing("factor");
    if (!(*factor > 0)) return p.invalid("factor", fmt::format("must be positive, got {}", *factor));
    rope.factor = *factor;
  }
  DRIFT_ASSIGN_OR_RETURN(rope.low_freq_factor, p.double_or("low_freq_factor", 1.0));
  DRIFT_ASSIGN_OR_RETURN(rope.high_freq_factor, p.double_or("high_freq_factor", 4.0));
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> original_max, p.optional_int("original_max_position_embeddings"));
  if (rope.type == RopeType::kLlama3 && !original_max) return p.missing("original_max_position_embeddings");
  // transformers 5 fills a missing yarn original length with max_position_embeddings.
  if (rope.type == RopeType::kYarn && !original_max) original_max = c.max_position_embeddings;
  rope.original_max_position_embeddings = original_max.value_or(0);
  if (rope.original_max_position_embeddings < 0)
    return p.invalid("original_max_position_embeddings", "must not be negative");
  DRIFT_ASSIGN_OR_RETURN(rope.beta_fast, p.double_or("beta_fast", 32.0));
  DRIFT_ASSIGN_OR_RETURN(rope.beta_slow, p.double_or("beta_slow", 1.0));
  DRIFT_ASSIGN_OR_RETURN(rope.attention_factor, p.optional_double("attention_factor"));
  DRIFT_ASSIGN_OR_RETURN(rope.mscale, p.double_or("mscale", 0.0));
  DRIFT_ASSIGN_OR_RETURN(rope.mscale_all_dim, p.double_or("mscale_all_dim", 0.0));
  DRIFT_ASSIGN_OR_RETURN(rope.truncate, p.bool_or("truncate", true));

  if (c.mla) {
    rope.rotary_dim = c.mla->qk_rope_head_dim;
    // DeepSeek checkpoints store each rope pair adjacently: the reference code de-interleaves q_pe/k_pe
    // before a half-split rotation, which equals rotating pairs (2i, 2i+1) in place (algorithms.md §7.2).
    // transformers' DeepSeek-V2 always rotates pairs (complex multiply) and has no field for it; V3 and
    // Youtu say so with rope_interleave (default true; a Youtu file may set false). q and k always agree,
    // since the cache keeps k_pe already rotated.
    if (family.deepseek_v2) {
      rope.interleaved = true;
    } else {
      DRIFT_ASSIGN_OR_RETURN(rope.interleaved, f.bool_or("rope_interleave", true));
    }
  } else {
    DRIFT_ASSIGN_OR_RETURN(std::optional<double> partial, p.optional_double("partial_rotary_factor"));
    if (!partial) {
      DRIFT_ASSIGN_OR_RETURN(partial, f.optional_double("partial_rotary_factor"));
    }
    rope.rotary_dim = int64_t(double(c.head_dim) * partial.value_or(1.0));
    rope.interleaved = false;
  }
  if (rope.rotary_dim <= 0 || rope.rotary_dim % 2 != 0 || rope.rotary_dim > c.head_dim)
    return invalid_argument(
        fmt::format("{}: rotary dim {} must be even and in (0, head_dim {}]", f.source(), rope.rotary_dim, c.head_dim));
  return rope;
}

Expected<std::optional<MoeConfig>> parse_moe(const JsonFields& f, const Family& family, const ModelConfig& c) {
  MoeConfig m;
  if (f.has("n_routed_experts")) {
    // first_k_dense_replace covering every layer leaves no MoE layer: a dense MLA model (Youtu-style),
    // whatever the (then unused, often null) expert fields say.
    DRIFT_ASSIGN_OR_RETURN(const int64_t first_dense, f.int_or("first_k_dense_replace", 0));
    if (first_dense >= c.num_layers) return std::optional<MoeConfig>();
    DRIFT_ASSIGN_OR_RETURN(m, parse_deepseek_moe(f, family));
  } else if (f.has("num_local_experts")) {
    DRIFT_ASSIGN_OR_RETURN(m, parse_local_experts_moe(f, c));
  } else {
    return std::optional<MoeConfig>();
  }
  DRIFT_RETURN_IF_ERROR(check_moe(f, m, c));
  return std::optional<MoeConfig>(m);
}

Status parse_layer_types(const JsonFields& f, const Family& family, ModelConfig& c) {
  DRIFT_ASSIGN_OR_RETURN(c.sliding_window, f.int_or("sliding_window", 0));
  if (c.sliding_window < 0)
    return f.invalid("sliding_window", fmt::format("must not be negative, got {}", c.sliding_window));
  // Qwen keeps a sliding_window value in every file but uses it only when use_sliding_window is true.
  const bool qwen = family.qwen2 || family.qwen3;
  DRIFT_ASSIGN_OR_RETURN(const bool use_sliding_window, f.bool_or("use_sliding_window", false));
  if (qwen && !use_sliding_window) c.sliding_window = 0;

  c.layer_types.assign(size_t(c.num_layers), LayerAttention::kFull);
  if (const json* types = f.find("layer_types")) {
    if (!types->is_array()) return f.type_error("layer_types", "a list of strings");
    if (int64_t(types->size()) != c.num_layers)
      return f.invalid("layer_types",
                       fmt::format("has {} entries but num_hidden_layers is {}", types->size(), c.num_layers));
    for (size_t i = 0; i < types->size(); ++i) {
      DRIFT_ASSIGN_OR_RETURN(c.layer_types[i], parse_layer_kind(f, (*types)[i], i));
    }
  } else if (family.gpt_oss) {
    // Even layers slide, odd layers see everything (layer 0 slides).
    for (size_t i = 0; i < c.layer_types.size(); i += 2) c.layer_types[i] = LayerAttention::kSliding;
  } else if (qwen && use_sliding_window) {
    DRIFT_ASSIGN_OR_RETURN(const int64_t max_window_layers, f.int_or("max_window_layers", c.num_layers));
    for (int64_t i = std::max<int64_t>(max_window_layers, 0); i < c.num_layers; ++i)
      c.layer_types[size_t(i)] = LayerAttention::kSliding;
  }
  // A "sliding" layer without a window attends to everything, as in transformers (window None).
  if (c.sliding_window == 0) c.layer_types.assign(size_t(c.num_layers), LayerAttention::kFull);
  return Status::Ok();
}

}  // namespace drift::weights
