// Paged causal attention on the CPU: each new token attends over its sequence's keys through the block
// table, with an exact softmax in double (this is the oracle the CUDA kernels are measured against).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

void CpuOps::paged_attention(const PagedAttentionParams& p) {
  const int64_t num_seqs = p.context_lens.size(0);
  const int64_t num_heads = p.q.size(1), head_dim = p.q.size(2);
  const int64_t block_size = p.k_cache.size(1), num_kv_heads = p.k_cache.size(2);
  // Without a v_cache (MLA), V is the first head_dim_v features of each K row.
  const int64_t head_dim_v = p.v_cache.defined() ? p.v_cache.size(3) : p.out.size(2);
  const int64_t max_blocks = p.block_tables.size(1);
  const int64_t group = num_heads / num_kv_heads;
  const int64_t q_stride = p.q_row_stride > 0 ? p.q_row_stride : num_heads * head_dim;
  const int32_t* query_start = p.query_start.data_as<int32_t>();
  const int32_t* context_lens = p.context_lens.data_as<int32_t>();

  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t q_begin = query_start[s], q_end = query_start[s + 1];
    const int32_t context_len = context_lens[s];
    const int32_t* table = p.block_tables.data_as<int32_t>() + s * max_blocks;
    DRIFT_CHECK_LE(int64_t(context_len), max_blocks * block_size);
#pragma omp parallel for collapse(2) if (int64_t(q_end - q_begin) * num_heads * context_len * head_dim >= kMinParallelElements)
    for (int32_t row = q_begin; row < q_end; ++row) {
      for (int64_t h = 0; h < num_heads; ++h) {
        const int32_t pos = context_len - (q_end - row);  // the new tokens are the last of the context
        const int32_t first = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
        const int64_t kv_head = h / group;
        const float* q = p.q.data_as<float>() + int64_t(row) * q_stride + h * head_dim;
        std::vector<double> scores(size_t(pos - first + 1));
        double max_score = p.sinks.defined() ? double(p.sinks.data_as<float>()[h]) : -INFINITY;
        for (int32_t key = first; key <= pos; ++key) {
          const int64_t slot = int64_t(table[key / block_size]) * block_size + key % block_size;
          const float* k = p.k_cache.data_as<float>() + (slot * num_kv_heads + kv_head) * head_dim;
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) dot += double(q[d]) * k[d];
          scores[size_t(key - first)] = dot * p.scale;
          max_score = std::max(max_score, scores[size_t(key - first)]);
        }
        double denom = p.sinks.defined() ? std::exp(double(p.sinks.data_as<float>()[h]) - max_score) : 0.0;
        for (double& sc : scores) denom += (sc = std::exp(sc - max_score));
        std::vector<double> acc(size_t(head_dim_v), 0.0);
        for (int32_t key = first; key <= pos; ++key) {
          const int64_t slot = int64_t(table[key / block_size]) * block_size + key % block_size;
          const float* v = p.v_cache.defined()
                               ? p.v_cache.data_as<float>() + (slot * num_kv_heads + kv_head) * head_dim_v
                               : p.k_cache.data_as<float>() + (slot * num_kv_heads + kv_head) * head_dim;
          const double w = scores[size_t(key - first)] / denom;
          for (int64_t d = 0; d < head_dim_v; ++d) acc[size_t(d)] += w * v[d];
        }
        float* out = p.out.data_as<float>() + (int64_t(row) * num_heads + h) * head_dim_v;
        for (int64_t d = 0; d < head_dim_v; ++d) out[d] = float(acc[size_t(d)]);
      }
    }
  }
}

}  // namespace drift::backend
