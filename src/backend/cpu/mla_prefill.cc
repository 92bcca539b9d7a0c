// MLA's expanded prefill on the CPU (ops.h: GatherContextParams, MlaPrefillParams): the packed context
// rows, and causal attention per head over them with an exact softmax in double, as paged_attention's.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

bool CpuOps::supports_mla_prefill(int64_t, int64_t, int64_t) const { return true; }

void CpuOps::gather_context(const GatherContextParams& p) {
  const int64_t num_seqs = p.context_lens.size(0), max_blocks = p.block_tables.size(1);
  const int64_t block_size = p.k_cache.size(1), split = p.head.size(1), width = p.k_cache.size(3);
  DRIFT_CHECK(p.k_cache.size(2) == 1 && p.tail.size(1) == width - split,
              "cpu gather_context: {} split into {} and {}", p.k_cache.describe(), p.head.describe(), p.tail.describe());
  DRIFT_CHECK(p.k_cache.dtype != DType::kF8E4M3 || p.k_scale.defined(), "cpu gather_context: an FP8 cache needs k_scale");
  const int32_t* lens = p.context_lens.data_as<int32_t>();
  int32_t* key_start = p.key_start.data_as<int32_t>();
  key_start[0] = 0;
  for (int64_t s = 0; s < num_seqs; ++s) key_start[s + 1] = key_start[s] + lens[s];
  DRIFT_CHECK_LE(int64_t(key_start[num_seqs]), p.head.size(0));
  const auto* cache = static_cast<const uint8_t*>(p.k_cache.data);
  const size_t row_bytes = size_t(width) * dtype_size(p.k_cache.dtype);
  std::vector<float> row(static_cast<size_t>(width));
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t* table = p.block_tables.data_as<int32_t>() + s * max_blocks;
    for (int64_t j = 0; j < lens[s]; ++j) {
      const int32_t block = table[j / block_size];
      DRIFT_CHECK(block >= 0, "gather_context reads position {} from a released block", j);
      const int64_t slot = int64_t(block) * block_size + j % block_size, out = key_start[s] + j;
      convert_to_f32(cache + size_t(slot) * row_bytes, p.k_cache.dtype, row.data(), row.size());
      if (p.k_cache.dtype == DType::kF8E4M3)
        for (float& x : row) x *= p.k_scale.data_as<float>()[slot];
      std::copy_n(row.begin(), split, p.head.data_as<float>() + out * split);
      std::copy(row.begin() + split, row.end(), p.tail.data_as<float>() + out * (width - split));
    }
  }
}

void CpuOps::mla_prefill_attention(const MlaPrefillParams& p) {
  const int64_t heads = p.q_nope.size(1), nope = p.q_nope.size(2), rope = p.q_rope.size(2), v = p.out.size(2);
  DRIFT_CHECK(p.kv.size(1) == heads && p.kv.size(2) == nope + v && p.k_rope.size(1) == rope,
              "cpu mla_prefill_attention: kv {} and k_rope {} for {} heads of {} + {}, values {}", p.kv.describe(),
              p.k_rope.describe(), heads, nope, rope, v);
  const int64_t num_seqs = p.query_start.size(0) - 1;
  const int32_t* query_start = p.query_start.data_as<int32_t>();
  const int32_t* key_start = p.key_start.data_as<int32_t>();
  const float* kv = p.kv.data_as<float>();
  const float* k_rope = p.k_rope.data_as<float>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t q_begin = query_start[s], q_end = query_start[s + 1];
    const int32_t k_begin = key_start[s], num_keys = key_start[s + 1] - k_begin;
#pragma omp parallel for collapse(2) if (int64_t(q_end - q_begin) * heads * num_keys * (nope + rope) >= kMinParallelElements)
    for (int32_t t = q_begin; t < q_end; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const int32_t seen = num_keys - (q_end - t) + 1;  // keys up to the token's own
        const float* qn = p.q_nope.data_as<float>() + (int64_t(t) * heads + h) * nope;
        const float* qr = p.q_rope.data_as<float>() + (int64_t(t) * heads + h) * rope;
        std::vector<double> w(size_t(std::max(seen, 0)));
        double max_score = -INFINITY;
        for (int32_t j = 0; j < seen; ++j) {
          const float* kn = kv + ((int64_t(k_begin) + j) * heads + h) * (nope + v);
          const float* kr = k_rope + (int64_t(k_begin) + j) * rope;
          double dot = 0.0;
          for (int64_t d = 0; d < nope; ++d) dot += double(qn[d]) * kn[d];
          for (int64_t d = 0; d < rope; ++d) dot += double(qr[d]) * kr[d];
          w[size_t(j)] = dot * p.scale;
          max_score = std::max(max_score, w[size_t(j)]);
        }
        double denom = 0.0;
        for (double& x : w) denom += (x = std::exp(x - max_score));
        std::vector<double> acc(size_t(v), 0.0);
        for (int32_t j = 0; j < seen; ++j) {
          const float* vv = kv + ((int64_t(k_begin) + j) * heads + h) * (nope + v) + nope;
          for (int64_t d = 0; d < v; ++d) acc[size_t(d)] += w[size_t(j)] / denom * vv[d];
        }
        float* out = p.out.data_as<float>() + (int64_t(t) * heads + h) * v;
        for (int64_t d = 0; d < v; ++d) out[d] = float(acc[size_t(d)]);
      }
    }
  }
}

}  // namespace drift::backend
