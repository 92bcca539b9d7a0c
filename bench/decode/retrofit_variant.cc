#include "retrofit_variant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <numeric>

#include "base/check.h"
#include "ceilings.h"
#include "weights/retrofit_config.h"
#include "weights/safetensors.h"

namespace drift::bench {

std::vector<RetrofitVariant> retrofit_variants(const std::vector<std::string>& names, const RetrofitVariant& geometry) {
  std::vector<RetrofitVariant> out;
  for (const std::string& name : names) {
    RetrofitVariant v = geometry;
    v.name = name;
    DRIFT_CHECK(name == "original" || name == "mla-lite" || name == "dsa-lite" || name == "both",
                "unknown retrofit variant '{}' (original, mla-lite, dsa-lite, both)", name);
    if (name == "original" || name == "dsa-lite") v.mla_rank = 0;
    if (name == "original" || name == "mla-lite") v.index_heads = 0;
    out.push_back(v);
  }
  return out;
}

namespace {

weights::TensorToWrite random_tensor(const std::string& name, int64_t rows, int64_t cols, uint64_t seed) {
  const std::vector<uint16_t> bits = random_bf16(size_t(rows * cols), seed);
  std::vector<std::byte> bytes(bits.size() * 2);
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  return {name, DType::kBF16, {rows, cols}, std::move(bytes)};
}

}  // namespace

void write_random_retrofit(const RetrofitVariant& v, int64_t layers, int64_t hidden, int64_t kv_heads,
                           int64_t head_dim, const std::string& path) {
  std::vector<weights::TensorToWrite> tensors;
  std::map<std::string, std::string> meta{{"format", "pt"}};
  uint64_t seed = 101;
  const int64_t nope = head_dim - 2 * v.mla_freqs;
  for (int64_t l = 0; l < layers; ++l) {
    const auto name = [&](const char* what) { return weights::retrofit_tensor_name(l, what); };
    if (v.mla_lite()) {
      tensors.push_back(random_tensor(name(weights::kMlaLiteKvDown), v.mla_rank, hidden, seed++));
      tensors.push_back(random_tensor(name(weights::kMlaLiteKUp), kv_heads * nope, v.mla_rank, seed++));
      tensors.push_back(random_tensor(name(weights::kMlaLiteVUp), kv_heads * head_dim, v.mla_rank, seed++));
      if (v.mla_shared_rope) tensors.push_back(random_tensor(name(weights::kMlaLiteKRope), 2 * v.mla_freqs, hidden, seed++));
    }
    if (v.dsa_lite()) {
      tensors.push_back(random_tensor(name(weights::kDsaIndexQ), v.index_heads * v.index_dim, hidden, seed++));
      tensors.push_back(random_tensor(name(weights::kDsaIndexK), v.index_dim, hidden, seed++));
      tensors.push_back(random_tensor(name(weights::kDsaIndexW), v.index_heads, hidden, seed++));
    }
  }
  if (v.mla_lite()) {
    std::vector<int32_t> freqs(size_t(v.mla_freqs));
    std::iota(freqs.begin(), freqs.end(), 0);
    meta[weights::kMetaRopeFreqs] = fmt::format("{}", fmt::join(freqs, ","));
  }
  if (v.dsa_lite()) {
    meta[weights::kMetaTopK] = std::to_string(v.top_k);
    meta[weights::kMetaSinkTokens] = std::to_string(v.sink_tokens);
    meta[weights::kMetaLocalWindow] = std::to_string(v.local_window);
  }
  const Status st = weights::write_safetensors(path, tensors, meta);
  DRIFT_CHECK(st.ok(), "{}", st.to_string());
}

}  // namespace drift::bench
