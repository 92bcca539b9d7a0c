#include "drift/model_info.h"

#include "engine/engine_impl.h"
#include "model/registry.h"
#include "weights/weight_store.h"

namespace drift {

Expected<ModelInfo> inspect_model(const std::string& model_dir, const std::string& kv_dtype_name) {
  DRIFT_ASSIGN_OR_RETURN(weights::ModelConfig c, weights::load_model_config(model_dir));
  DRIFT_ASSIGN_OR_RETURN(weights::WeightStore store, weights::WeightStore::open(model_dir));
  DRIFT_ASSIGN_OR_RETURN(const DType kv_dtype, engine::parse_kv_cache_dtype(kv_dtype_name, DType::kBF16));
  ModelInfo info;
  for (const std::string& name : store.names()) {
    const weights::TensorInfo* t = *store.get(name);
    info.num_parameters += t->numel();
    info.weight_bytes += int64_t(t->bytes.size());
    info.parameters_by_dtype[std::string(dtype_name(t->dtype))] += t->numel();
  }
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
  DRIFT_ASSIGN_OR_RETURN(const std::vector<core::KvSpec> layout, model::kv_layout(c, kv_dtype));
  for (const core::KvSpec& g : layout) {
    const int64_t bytes = g.bytes_per_token_per_layer() * g.num_layers;
    info.kv_groups.push_back({.name = g.name, .kind = core::kv_kind_name(g.kind), .num_layers = g.num_layers,
                              .kv_heads = g.kv_heads, .head_dim = g.head_dim, .latent_dim = g.latent_dim,
                              .sliding_window = g.sliding_window, .bytes_per_token = bytes});
    info.kv_bytes_per_token += bytes;
  }
  const int64_t value_head_dim = c.mla ? c.mla->v_head_dim : c.head_dim;
  info.mha_kv_bytes_per_token =
      (c.num_heads * c.head_dim + c.num_heads * value_head_dim) * c.num_layers * int64_t(dtype_size(kv_dtype));
  return info;
}

}  // namespace drift
