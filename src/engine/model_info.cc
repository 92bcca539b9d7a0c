#include "drift/model_info.h"

#include <filesystem>

#include "core/kv/kv_sizing.h"
#include "engine/engine_impl.h"
#include "model/registry.h"
#include "weights/weight_store.h"

namespace drift {

namespace {

// A config.json alone (a model's shape, for capacity planning) has no weights to count.
bool has_weight_files(const std::string& model_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir, ec)) {
    const std::filesystem::path& p = entry.path();
    if (p.extension() == ".safetensors" || p.filename() == "model.safetensors.index.json") return true;
  }
  return false;
}

Status count_weights(const std::string& model_dir, ModelInfo& info) {
  DRIFT_ASSIGN_OR_RETURN(weights::WeightStore store, weights::WeightStore::open(model_dir));
  for (const std::string& name : store.names()) {
    const weights::TensorInfo* t = *store.get(name);
    info.num_parameters += t->numel();
    info.weight_bytes += int64_t(t->bytes.size());
    info.parameters_by_dtype[std::string(dtype_name(t->dtype))] += t->numel();
  }
  info.has_weights = true;
  return Status::Ok();
}

}  // namespace

Expected<ModelInfo> inspect_model(const std::string& model_dir, const std::string& kv_dtype_name,
                                  const std::string& retrofit_file) {
  DRIFT_ASSIGN_OR_RETURN(weights::ModelConfig c, weights::load_model_config(model_dir));
  DRIFT_ASSIGN_OR_RETURN(const DType kv_dtype, engine::parse_kv_cache_dtype(kv_dtype_name, DType::kBF16));
  ModelInfo info;
  if (has_weight_files(model_dir)) DRIFT_RETURN_IF_ERROR(count_weights(model_dir, info));
  info.architecture = c.architecture;
  info.model_type = c.model_type;
  info.num_layers = c.num_layers;
  info.hidden_size = c.hidden_size;
  info.num_heads = c.num_heads;
  info.num_kv_heads = c.num_kv_heads;
  info.head_dim = c.head_dim;
  info.intermediate_size = c.intermediate_size;
  info.vocab_size = c.vocab_size;
  info.max_position_embeddings = c.max_position_embeddings;
  info.kv_dtype = std::string(dtype_name(kv_dtype));
  if (!retrofit_file.empty()) {
    DRIFT_ASSIGN_OR_RETURN(const std::vector<core::KvSpec> own, model::kv_layout(c, kv_dtype));
    for (const core::KvSpec& g : own) info.kv_bytes_per_token_without_retrofit += g.bytes_per_token_per_layer() * g.num_layers;
    const int64_t model_kv_heads = c.num_kv_heads;
    DRIFT_RETURN_IF_ERROR(model::apply_retrofit(c, retrofit_file));
    info.retrofit_file = retrofit_file;
    info.retrofit_summary = weights::describe_retrofit(*c.retrofit, model_kv_heads);
  }
  DRIFT_ASSIGN_OR_RETURN(const std::vector<core::KvSpec> layout, model::kv_layout(c, kv_dtype));
  for (const core::KvSpec& g : layout) {
    const int64_t bytes = g.bytes_per_token_per_layer() * g.num_layers;
    info.kv_groups.push_back({.name = g.name, .kind = core::kv_kind_name(g.kind), .num_layers = g.num_layers,
                              .kv_heads = g.kv_heads, .head_dim = g.head_dim, .latent_dim = g.latent_dim,
                              .sliding_window = g.sliding_window, .bytes_per_token = bytes});
    info.kv_bytes_per_token += bytes;
  }
  const int64_t value_head_dim = c.mla ? c.mla->v_head_dim : c.head_dim;
  // FP8 rows carry an fp32 scale each (KvSpec): one per head for K and for V.
  const int64_t scale_bytes = kv_dtype == DType::kF8E4M3 ? 2 * c.num_heads * 4 : 0;
  info.mha_kv_bytes_per_token =
      ((c.num_heads * c.head_dim + c.num_heads * value_head_dim) * int64_t(dtype_size(kv_dtype)) + scale_bytes) *
      c.num_layers;
  return info;
}

KvFootprint kv_footprint(const ModelInfo& info, int64_t context, int32_t block_size, int32_t max_step_tokens) {
  KvFootprint f;
  f.context = context;
  f.block_size = block_size;
  const int64_t whole = core::blocks_for_tokens(context, block_size);
  for (const KvGroupInfo& g : info.kv_groups) {
    const int64_t bytes_per_block = g.bytes_per_token * block_size;
    const int64_t blocks = core::max_blocks_held(g.sliding_window, context, max_step_tokens, block_size);
    f.group_blocks.push_back(blocks);
    f.group_bytes.push_back(blocks * bytes_per_block);
    f.group_full_attention_bytes.push_back(whole * bytes_per_block);
    f.bytes += blocks * bytes_per_block;
    f.full_attention_bytes += whole * bytes_per_block;
  }
  return f;
}

}  // namespace drift
