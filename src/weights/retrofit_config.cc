#include "weights/retrofit_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <set>

#include "weights/model_config.h"
#include "weights/safetensors.h"

namespace drift::weights {

namespace {

Expected<int64_t> parse_int(const std::string& path, const std::string& key, std::string_view text) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    return invalid_argument(fmt::format("retrofit {}: metadata '{}' is '{}', not an integer", path, key, text));
  return value;
}

Expected<int64_t> metadata_int(const SafetensorsFile& file, const char* key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end())
    return invalid_argument(fmt::format("retrofit {}: metadata '{}' is missing", file.path(), key));
  return parse_int(file.path(), key, it->second);
}

Expected<std::vector<int32_t>> metadata_int_list(const SafetensorsFile& file, const char* key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end())
    return invalid_argument(fmt::format("retrofit {}: metadata '{}' is missing", file.path(), key));
  std::vector<int32_t> values;
  std::string_view rest = it->second;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    DRIFT_ASSIGN_OR_RETURN(int64_t v, parse_int(file.path(), key, rest.substr(0, comma)));
    values.push_back(int32_t(v));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return values;
}

// The first dimension of layer 0's tensor `name`, or nullopt when the file does not hold it.
Expected<std::optional<int64_t>> rows_of(const SafetensorsFile& file, const char* name) {
  const TensorInfo* t = file.find(retrofit_tensor_name(0, name));
  if (t == nullptr) return std::optional<int64_t>();
  if (t->shape.size() != 2)
    return invalid_argument(fmt::format("retrofit {}: tensor '{}' has shape {}, expected two dimensions", file.path(),
                                        t->name, format_shape(t->shape)));
  return std::optional<int64_t>(t->shape[0]);
}

// A file from a newer tool may carry parts this engine would otherwise skip in silence (and then compute
// another function than the one trained): every mla_lite./dsa_lite. metadata key and tensor must be known.
Status check_all_parts_known(const SafetensorsFile& file) {
  static const std::set<std::string_view> meta_keys = {kMetaRopeFreqs, kMetaTopK, kMetaSinkTokens, kMetaLocalWindow,
                                                       kMetaIndexRope};
  static const std::set<std::string_view> tensors = {kMlaLiteKvDown, kMlaLiteKUp, kMlaLiteVUp, kMlaLiteQDown,
                                                     kMlaLiteQUp,    kMlaLiteKRope, kDsaIndexQ, kDsaIndexK,
                                                     kDsaIndexW};
  const auto retrofit_part = [](std::string_view name) {
    return name.starts_with("mla_lite.") || name.starts_with("dsa_lite.");
  };
  for (const auto& [key, value] : file.metadata()) {
    if (retrofit_part(key) && !meta_keys.contains(key))
      return invalid_argument(fmt::format("retrofit {}: metadata '{}' is not one this engine reads (a newer tool's "
                                          "file?); refusing rather than running without it",
                                          file.path(), key));
  }
  constexpr std::string_view kLayerPart = ".self_attn.";  // model.layers.{i}.self_attn.<part>
  for (const std::string& name : file.names()) {
    const size_t at = name.find(kLayerPart);
    const std::string_view part = at == std::string::npos ? std::string_view(name)
                                                          : std::string_view(name).substr(at + kLayerPart.size());
    if (!retrofit_part(part) || !tensors.contains(part))
      return invalid_argument(fmt::format("retrofit {}: tensor '{}' is not one this engine reads", file.path(), name));
  }
  return Status::Ok();
}

}  // namespace

std::string retrofit_tensor_name(int64_t layer, const char* name) {
  return fmt::format("model.layers.{}.self_attn.{}", layer, name);
}

Expected<RetrofitConfig> read_retrofit_config(const std::string& path) {
  DRIFT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  DRIFT_RETURN_IF_ERROR(check_all_parts_known(file));
  RetrofitConfig r;
  r.file = path;
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> rank, rows_of(file, kMlaLiteKvDown));
  if (rank) {
    MlaLiteConfig m;
    m.rank = *rank;
    DRIFT_ASSIGN_OR_RETURN(m.rope_freqs, metadata_int_list(file, kMetaRopeFreqs));
    DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> q_rank, rows_of(file, kMlaLiteQDown));
    if (q_rank.has_value() != (file.find(retrofit_tensor_name(0, kMlaLiteQUp)) != nullptr))
      return invalid_argument(fmt::format("retrofit {}: '{}' and '{}' come together", path,
                                          retrofit_tensor_name(0, kMlaLiteQDown), retrofit_tensor_name(0, kMlaLiteQUp)));
    m.q_rank = q_rank.value_or(0);
    DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> k_rope_rows, rows_of(file, kMlaLiteKRope));
    m.k_rope_rows = k_rope_rows.value_or(0);
    r.mla_lite = m;
  }
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> index_dim, rows_of(file, kDsaIndexK));
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> index_heads, rows_of(file, kDsaIndexW));
  if (index_dim || index_heads) {
    if (!index_dim || !index_heads)
      return invalid_argument(fmt::format("retrofit {}: '{}' and '{}' come together", path,
                                          retrofit_tensor_name(0, kDsaIndexK), retrofit_tensor_name(0, kDsaIndexW)));
    DsaLiteConfig d;
    d.index_dim = *index_dim;
    d.index_heads = *index_heads;
    DRIFT_ASSIGN_OR_RETURN(int64_t top_k, metadata_int(file, kMetaTopK));
    DRIFT_ASSIGN_OR_RETURN(int64_t sinks, metadata_int(file, kMetaSinkTokens));
    DRIFT_ASSIGN_OR_RETURN(int64_t window, metadata_int(file, kMetaLocalWindow));
    d.top_k = int32_t(top_k);
    d.sink_tokens = int32_t(sinks);
    d.local_window = int32_t(window);
    if (file.metadata().contains(kMetaIndexRope)) {
      DRIFT_ASSIGN_OR_RETURN(int64_t index_rope, metadata_int(file, kMetaIndexRope));
      d.index_rope = int32_t(index_rope);
    }
    r.dsa_lite = d;
  }
  if (!r.mla_lite && !r.dsa_lite)
    return invalid_argument(fmt::format("retrofit {}: holds neither MLA-lite ('{}') nor DSA-lite ('{}') tensors", path,
                                        retrofit_tensor_name(0, kMlaLiteKvDown), retrofit_tensor_name(0, kDsaIndexK)));
  return r;
}

namespace {

Status check_mla_lite(const ModelConfig& c, const MlaLiteConfig& m, const std::string& file) {
  const int64_t half = c.rope.rotary_dim / 2;
  if (m.rope_freqs.empty())
    return invalid_argument(fmt::format("retrofit {}: {} is empty; MLA-lite keeps RoPE on at least one frequency",
                                        file, kMetaRopeFreqs));
  std::set<int32_t> seen;
  for (const int32_t f : m.rope_freqs) {
    if (f < 0 || f >= half || !seen.insert(f).second)
      return invalid_argument(fmt::format("retrofit {}: {} lists frequency {}: each must be distinct and in [0, {})",
                                          file, kMetaRopeFreqs, f, half));
  }
  const int64_t full_rank = c.num_kv_heads * (2 * c.head_dim - m.rope_dim());
  if (m.rank < 1 || m.rank > full_rank)
    return invalid_argument(fmt::format(
        "retrofit {}: MLA-lite rank d_c = {} is out of range [1, {}] ({} kv heads x (K without its {} RoPE features + V))",
        file, m.rank, full_rank, c.num_kv_heads, m.rope_dim()));
  if (m.k_rope_rows != 0 && m.k_rope_rows != m.rope_dim() && m.k_rope_rows != c.num_kv_heads * m.rope_dim())
    return invalid_argument(fmt::format(
        "retrofit {}: '{}' has {} rows: a shared RoPE key has {} ({} features of {} frequencies), one per KV head {}",
        file, kMlaLiteKRope, m.k_rope_rows, m.rope_dim(), m.rope_dim(), m.rope_freqs.size(),
        c.num_kv_heads * m.rope_dim()));
  return Status::Ok();
}

Status check_dsa_lite(const DsaLiteConfig& d, const std::string& file) {
  if (d.index_heads < 1 || d.index_dim < 1)
    return invalid_argument(fmt::format("retrofit {}: DSA-lite needs at least one indexer head and key feature, has {} x {}",
                                        file, d.index_heads, d.index_dim));
  if (d.sink_tokens < 0 || d.local_window < 1 || d.top_k <= d.sink_tokens + d.local_window)
    return invalid_argument(fmt::format(
        "retrofit {}: DSA-lite {} = {} must exceed {} ({}) + {} ({}, at least 1) so the indexer has positions to choose",
        file, kMetaTopK, d.top_k, kMetaSinkTokens, d.sink_tokens, kMetaLocalWindow, d.local_window));
  if (d.index_rope < 0 || d.index_rope % 2 != 0 || d.index_rope > d.index_dim)
    return invalid_argument(fmt::format("retrofit {}: DSA-lite {} = {} must be even and in [0, {}] (the key's features)",
                                        file, kMetaIndexRope, d.index_rope, d.index_dim));
  return Status::Ok();
}

}  // namespace

Status check_retrofit(const ModelConfig& c, const RetrofitConfig& r) {
  const auto refuse = [&](const char* why) {
    return unsupported(fmt::format("retrofit {} cannot apply to {}: {}", r.file, c.architecture, why));
  };
  if (c.mla) return refuse("the model already has latent attention (MLA)");
  if (c.attention_sinks || c.sliding_window > 0) return refuse("retrofits do not combine with sinks or sliding windows");
  if (r.mla_lite) {
    if (c.qk_norm) return refuse("MLA-lite cannot carry per-head k norms (qk_norm)");
    DRIFT_RETURN_IF_ERROR(check_mla_lite(c, *r.mla_lite, r.file));
  }
  if (r.dsa_lite) {
    DRIFT_RETURN_IF_ERROR(check_dsa_lite(*r.dsa_lite, r.file));
  }
  return Status::Ok();
}

std::string describe_retrofit(const RetrofitConfig& r, int64_t num_kv_heads) {
  std::vector<std::string> parts;
  if (r.mla_lite) {
    const MlaLiteConfig& m = *r.mla_lite;
    std::string s = fmt::format("MLA-lite d_c {}, RoPE kept on {} frequencies ({}), a cache row of {} values", m.rank,
                                m.rope_freqs.size(), m.shared_rope(num_kv_heads) ? "one shared key" : "a key per KV head",
                                m.cache_width(num_kv_heads));
    if (m.q_rank > 0) s += fmt::format(", query adapter rank {}", m.q_rank);
    if (m.k_rope_rows > 0) s += ", trained kept K rows";
    parts.push_back(std::move(s));
  }
  if (r.dsa_lite) {
    const DsaLiteConfig& d = *r.dsa_lite;
    std::string s = fmt::format("DSA-lite indexer {} heads x {}", d.index_heads, d.index_dim);
    if (d.index_rope > 0) s += fmt::format(" (RoPE on {})", d.index_rope);
    s += fmt::format(", top-{} ({} sinks, window {})", d.top_k, d.sink_tokens, d.local_window);
    parts.push_back(std::move(s));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace drift::weights
