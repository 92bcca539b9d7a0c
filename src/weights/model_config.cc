#include "weights/model_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "weights/config_sections.h"
#include "weights/json_fields.h"

namespace drift::weights {

namespace {

using nlohmann::json;

Expected<json> parse_json_text(std::string_view text, std::string_view source) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return data_loss(fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
}

Status require_positive(const JsonFields& f, std::string_view key, int64_t value) {
  if (value <= 0) return f.invalid(key, fmt::format("must be positive, got {}", value));
  return Status::Ok();
}

Expected<std::optional<int32_t>> token_id(const JsonFields& f, std::string_view key) {
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> id, f.optional_int(key));
  if (!id) return std::optional<int32_t>();
  if (*id < 0 || *id > std::numeric_limits<int32_t>::max())
    return f.invalid(key, fmt::format("is not a token id: {}", *id));
  return std::optional<int32_t>(int32_t(*id));
}

// eos_token_id is an integer or a list of them; nullopt when the file does not say.
Expected<std::optional<std::vector<int32_t>>> token_ids(const JsonFields& f, std::string_view key) {
  const json* v = f.find(key);
  if (!v) return std::optional<std::vector<int32_t>>();
  if (!v->is_array()) {
    DRIFT_ASSIGN_OR_RETURN(std::optional<int32_t> one, token_id(f, key));
    return std::optional<std::vector<int32_t>>(std::vector<int32_t>{*one});
  }
  std::vector<int32_t> ids;
  for (const json& item : *v) {
    if (!item.is_number_integer()) return f.type_error(key, "an integer or a list of integers");
    const int64_t id = item.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return f.invalid(key, fmt::format("holds {}, which is not a token id", id));
    ids.push_back(int32_t(id));
  }
  return std::optional<std::vector<int32_t>>(std::move(ids));
}

Status parse_shape(const JsonFields& f, ModelConfig& c) {
  DRIFT_ASSIGN_OR_RETURN(c.vocab_size, f.required_int("vocab_size"));
  DRIFT_ASSIGN_OR_RETURN(c.hidden_size, f.required_int("hidden_size"));
  DRIFT_ASSIGN_OR_RETURN(c.intermediate_size, f.required_int("intermediate_size"));
  DRIFT_ASSIGN_OR_RETURN(c.num_layers, f.required_int("num_hidden_layers"));
  DRIFT_ASSIGN_OR_RETURN(c.num_heads, f.required_int("num_attention_heads"));
  DRIFT_ASSIGN_OR_RETURN(c.num_kv_heads, f.int_or("num_key_value_heads", c.num_heads));
  DRIFT_ASSIGN_OR_RETURN(c.max_position_embeddings, f.required_int("max_position_embeddings"));
  DRIFT_RETURN_IF_ERROR(require_positive(f, "vocab_size", c.vocab_size));
  DRIFT_RETURN_IF_ERROR(require_positive(f, "hidden_size", c.hidden_size));
  DRIFT_RETURN_IF_ERROR(require_positive(f, "intermediate_size", c.intermediate_size));
  DRIFT_RETURN_IF_ERROR(require_positive(f, "num_hidden_layers", c.num_layers));
  DRIFT_RETURN_IF_ERROR(require_positive(f, "num_attention_heads", c.num_heads));
  DRIFT_RETURN_IF_ERROR(require_positive(f, "num_key_value_heads", c.num_kv_heads));
  DRIFT_RETURN_IF_ERROR(require_positive(f, "max_position_embeddings", c.max_position_embeddings));
  if (c.num_heads % c.num_kv_heads != 0)
    return f.invalid("num_key_value_heads",
                     fmt::format("({}) must divide num_attention_heads ({})", c.num_kv_heads, c.num_heads));

  if (c.mla) {
    c.head_dim = c.mla->qk_nope_head_dim + c.mla->qk_rope_head_dim;
  } else if (f.has("head_dim")) {
    DRIFT_ASSIGN_OR_RETURN(c.head_dim, f.required_int("head_dim"));
    DRIFT_RETURN_IF_ERROR(require_positive(f, "head_dim", c.head_dim));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return f.invalid("hidden_size", fmt::format("({}) is not a multiple of num_attention_heads ({}) and there is "
                                                  "no head_dim",
                                                  c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }

  DRIFT_ASSIGN_OR_RETURN(c.rms_norm_eps, f.double_or("rms_norm_eps", 1e-6));
  if (!(c.rms_norm_eps > 0)) return f.invalid("rms_norm_eps", "must be positive");
  DRIFT_ASSIGN_OR_RETURN(c.hidden_act, f.string_or("hidden_act", "silu"));
  return Status::Ok();
}

Status parse_biases_and_norms(const JsonFields& f, const Family& family, ModelConfig& c) {
  // Youtu's config class defaults to tied embeddings; every other family here defaults to untied.
  DRIFT_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.bool_or("tie_word_embeddings", family.youtu));
  if (family.qwen2) {
    // Qwen2 hard-codes bias on q/k/v and none on o_proj; its config has no field for it.
    c.attention_bias = true;
    c.attention_out_bias = false;
  } else {
    // Llama, Qwen3, GPT-OSS and the MLA families apply attention_bias to the output projection too.
    DRIFT_ASSIGN_OR_RETURN(c.attention_bias, f.bool_or("attention_bias", false));
    c.attention_out_bias = c.attention_bias;
  }
  DRIFT_ASSIGN_OR_RETURN(c.mlp_bias, f.bool_or("mlp_bias", false));
  c.qk_norm = family.qwen3;
  c.attention_sinks = family.gpt_oss;
  // transformers' GptOssExperts clamps at 7.0 with alpha 1.702 whatever the file says (it reads neither).
  DRIFT_ASSIGN_OR_RETURN(c.swiglu_limit, f.double_or("swiglu_limit", family.gpt_oss ? 7.0 : 0.0));
  c.swiglu_alpha = 1.702;
  return Status::Ok();
}

Status parse_quantization(const JsonFields& f, ModelConfig& c) {
  const json* q = f.find("quantization_config");
  if (!q) return Status::Ok();
  if (!q->is_object()) return f.type_error("quantization_config", "an object");
  const JsonFields qf(*q, f.source(), "quantization_config.");
  DRIFT_ASSIGN_OR_RETURN(c.quant_method, qf.string_or("quant_method", ""));
  if (c.quant_method == "mxfp4") return Status::Ok();
  if (c.quant_method != "fp8")
    return unsupported(fmt::format("{}: quantization_config.quant_method '{}' is not supported (fp8, mxfp4 are)",
                                   f.source(), c.quant_method));
  DRIFT_ASSIGN_OR_RETURN(std::string fmt_name, qf.string_or("fmt", "e4m3"));
  if (fmt_name != "e4m3")
    return unsupported(fmt::format("{}: fp8 format '{}' is not supported (e4m3 is)", f.source(), fmt_name));
  DRIFT_ASSIGN_OR_RETURN(std::string activation_scheme, qf.string_or("activation_scheme", "dynamic"));
  if (activation_scheme != "dynamic")
    return unsupported(
        fmt::format("{}: fp8 activation_scheme '{}' is not supported (dynamic is)", f.source(), activation_scheme));
  if (const json* block = qf.find("weight_block_size")) {
    if (!block->is_array() || block->size() != 2) return qf.type_error("weight_block_size", "a list of two integers");
    for (const json& b : *block) {
      if (!b.is_number_integer() || b.get<int64_t>() <= 0)
        return qf.type_error("weight_block_size", "a list of two positive integers");
      c.quant_block_size.push_back(b.get<int64_t>());
    }
  }
  return Status::Ok();
}

Status parse_generation_config(const json& gen, const std::string& source, ModelConfig& c) {
  if (!gen.is_object()) return data_loss(source + ": not a JSON object");
  const JsonFields g(gen, source);
  DRIFT_ASSIGN_OR_RETURN(std::optional<int32_t> bos, token_id(g, "bos_token_id"));
  if (bos) c.bos_token_id = bos;
  DRIFT_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> eos, token_ids(g, "eos_token_id"));
  if (eos) c.eos_token_ids = *std::move(eos);

  DRIFT_ASSIGN_OR_RETURN(std::optional<double> temperature, g.optional_double("temperature"));
  DRIFT_ASSIGN_OR_RETURN(std::optional<double> top_p, g.optional_double("top_p"));
  DRIFT_ASSIGN_OR_RETURN(std::optional<double> repetition_penalty, g.optional_double("repetition_penalty"));
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, g.optional_int("top_k"));
  if (temperature) c.default_temperature = float(*temperature);
  if (top_p) c.default_top_p = float(*top_p);
  if (repetition_penalty) c.default_repetition_penalty = float(*repetition_penalty);
  if (top_k) {
    if (*top_k < 0 || *top_k > std::numeric_limits<int32_t>::max())
      return g.invalid("top_k", fmt::format("is out of range: {}", *top_k));
    c.default_top_k = int32_t(*top_k);
  }
  return Status::Ok();
}

Expected<ModelConfig> parse_config(const json& config, const std::string& source, const json* generation,
                                   const std::string& generation_source) {
  if (!config.is_object()) return data_loss(source + ": not a JSON object");
  const JsonFields f(config, source);
  ModelConfig c;

  if (const json* archs = f.find("architectures")) {
    if (!archs->is_array()) return f.type_error("architectures", "a list of strings");
    for (const json& a : *archs)
      if (!a.is_string()) return f.type_error("architectures", "a list of strings");
    if (!archs->empty()) c.architecture = (*archs)[0].get<std::string>();
  }
  DRIFT_ASSIGN_OR_RETURN(c.model_type, f.string_or("model_type", ""));
  const Family family = classify_family(c.model_type, c.architecture);

  DRIFT_ASSIGN_OR_RETURN(c.mla, parse_mla(f));
  DRIFT_RETURN_IF_ERROR(parse_shape(f, c));
  DRIFT_RETURN_IF_ERROR(parse_biases_and_norms(f, family, c));
  DRIFT_ASSIGN_OR_RETURN(c.rope, parse_rope(f, family, c));
  DRIFT_ASSIGN_OR_RETURN(c.moe, parse_moe(f, family, c));
  DRIFT_RETURN_IF_ERROR(parse_layer_types(f, family, c));
  DRIFT_RETURN_IF_ERROR(parse_quantization(f, c));

  if (f.has("torch_dtype")) {
    DRIFT_ASSIGN_OR_RETURN(c.torch_dtype, f.string_or("torch_dtype", ""));
  } else {
    DRIFT_ASSIGN_OR_RETURN(c.torch_dtype, f.string_or("dtype", ""));
  }
  DRIFT_ASSIGN_OR_RETURN(c.bos_token_id, token_id(f, "bos_token_id"));
  DRIFT_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> eos, token_ids(f, "eos_token_id"));
  if (eos) c.eos_token_ids = *std::move(eos);

  if (generation) DRIFT_RETURN_IF_ERROR(parse_generation_config(*generation, generation_source, c));
  return c;
}

}  // namespace

Expected<ModelConfig> parse_model_config(std::string_view config_json, std::string_view generation_config_json,
                                         std::string_view source_name) {
  const std::string source(source_name);
  const std::string generation_source = fmt::format("generation_config.json for {}", source_name);
  DRIFT_ASSIGN_OR_RETURN(json config, parse_json_text(config_json, source));
  if (generation_config_json.empty()) return parse_config(config, source, nullptr, generation_source);
  DRIFT_ASSIGN_OR_RETURN(json generation, parse_json_text(generation_config_json, generation_source));
  return parse_config(config, source, &generation, generation_source);
}

Expected<ModelConfig> load_model_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  const std::string generation_path = (fs::path(model_dir) / "generation_config.json").string();
  const auto as_text = [](const MappedFile& file) {
    return std::string_view(reinterpret_cast<const char*>(file.bytes().data()), file.bytes().size());
  };

  DRIFT_ASSIGN_OR_RETURN(MappedFile config_file, MappedFile::open(config_path));
  DRIFT_ASSIGN_OR_RETURN(json config, parse_json_text(as_text(config_file), config_path));
  std::error_code ec;
  if (!fs::exists(generation_path, ec)) return parse_config(config, config_path, nullptr, generation_path);
  DRIFT_ASSIGN_OR_RETURN(MappedFile generation_file, MappedFile::open(generation_path));
  DRIFT_ASSIGN_OR_RETURN(json generation, parse_json_text(as_text(generation_file), generation_path));
  return parse_config(config, config_path, &generation, generation_path);
}

}  // namespace drift::weights
