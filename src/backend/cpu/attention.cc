// Paged attention on the CPU: each new token attends over the keys its sequence lets it see (ops.h:
// chains, draft trees, block-table views) with an exact softmax in double. This is the oracle the CUDA
// kernels are measured against. The cache may hold fp32, bf16 or fp8 e4m3 codes with a scale per (token,
// kv head) row (the KV dtype is the engine's choice); fp8 rows are dequantized as code * scale.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

namespace {

float to_float(float v) { return v; }
float to_float(uint16_t v) { return bf16_to_f32(v); }
float to_float(uint8_t v) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = f8e4m3_to_f32(uint8_t(c));
    return t;
  }();
  return table[v];
}

// The scale of cache row `row` (slot * kv_heads + head): 1 for a cache without scales (F32, BF16).
double row_scale(const Tensor& scales, int64_t row) {
  return scales.defined() ? double(scales.data_as<float>()[row]) : 1.0;
}

// The keys of one sequence, and which of them a query sees (the rules in ops.h).
struct SeqKeys {
  const int32_t* table = nullptr;            // [entries]
  const int32_t* block_positions = nullptr;  // [entries] logical block of each entry, or null: entry i is block i
  int32_t entries = 0, block_size = 0, context_len = 0;
  int32_t tree_start = 0;                    // cache position of the first new token
  const uint32_t* mask = nullptr;            // [num_new rows, mask_words] of this sequence, or null
  int32_t mask_words = 0, window = 0;

  bool visible(int32_t q_row, int32_t q_pos, int32_t pos) const {
    const bool in_window = window <= 0 || pos > q_pos - window;
    if (mask != nullptr && pos >= tree_start) {
      const int32_t j = pos - tree_start;
      if (j < 32 * mask_words) return in_window && ((mask[int64_t(q_row) * mask_words + j / 32] >> (j % 32)) & 1u);
    }
    return pos <= q_pos && in_window;
  }

  // Calls f(position, slot) for each key query row `q_row` (at q_pos) sees, in ascending position.
  template <class F>
  void for_each_visible(int32_t q_row, int32_t q_pos, F&& f) const {
    for (int32_t i = 0; i < entries; ++i) {
      const int32_t logical = block_positions != nullptr ? block_positions[i] : i;
      for (int32_t off = 0; off < block_size; ++off) {
        const int32_t pos = logical * block_size + off;
        if (pos >= context_len) break;
        if (!visible(q_row, q_pos, pos)) continue;
        DRIFT_CHECK(table[i] >= 0, "attention reads position {} from a released block (table entry {})", pos, i);
        f(pos, int64_t(table[i]) * block_size + off);
      }
    }
  }
};

// The keys DSA-lite's indexer chose for each query row: the same interface as SeqKeys.
struct SelectedKeys {
  const int32_t* table = nullptr;     // [entries] of this sequence
  const int32_t* selected = nullptr;  // [rows of this sequence, top_k] positions, -1 unused
  int32_t top_k = 0, block_size = 0;
  int32_t context_len = 0;            // only sizes the parallel loop: keys per query

  template <class F>
  void for_each_visible(int32_t q_row, int32_t, F&& f) const {
    for (int32_t i = 0; i < top_k; ++i) {
      const int32_t pos = selected[int64_t(q_row) * top_k + i];
      if (pos < 0) continue;
      const int32_t block = table[pos / block_size];
      DRIFT_CHECK(block >= 0, "sparse attention reads position {} from a released block", pos);
      f(pos, int64_t(block) * block_size + pos % block_size);
    }
  }
};

template <class KvT, class Keys>
void attend_rows(const PagedAttentionParams& p, const Keys& keys, int32_t q_begin, int32_t q_end) {
  const int64_t num_heads = p.q.size(1), head_dim = p.q.size(2);
  const int64_t num_kv_heads = p.k_cache.size(2);
  // Without a v_cache (MLA), V is the first head_dim_v features of each K row.
  const int64_t head_dim_v = p.v_cache.defined() ? p.v_cache.size(3) : p.out.size(2);
  const int64_t v_row = p.v_cache.defined() ? head_dim_v : head_dim;
  const KvT* k_cache = p.k_cache.data_as<KvT>();
  const KvT* v_cache = p.v_cache.defined() ? p.v_cache.data_as<KvT>() : k_cache;
  const Tensor& v_scales = p.v_cache.defined() ? p.v_scale : p.k_scale;  // the shared latent's are K's
  const int64_t group = num_heads / num_kv_heads;
  const int64_t q_stride = p.q_row_stride > 0 ? p.q_row_stride : num_heads * head_dim;
  const int32_t* q_positions = p.q_positions.defined() ? p.q_positions.data_as<int32_t>() : nullptr;
#pragma omp parallel for collapse(2) if (int64_t(q_end - q_begin) * num_heads * keys.context_len * head_dim >= kMinParallelElements)
  for (int32_t row = q_begin; row < q_end; ++row) {
    for (int64_t h = 0; h < num_heads; ++h) {
      const int32_t q_pos = q_positions != nullptr ? q_positions[row] : keys.context_len - (q_end - row);
      const int64_t kv_head = h / group;
      const float* q = p.q.data_as<float>() + int64_t(row) * q_stride + h * head_dim;
      std::vector<double> scores;
      std::vector<int64_t> slots;
      double max_score = p.sinks.defined() ? double(p.sinks.data_as<float>()[h]) : -INFINITY;
      keys.for_each_visible(row - q_begin, q_pos, [&](int32_t, int64_t slot) {
        const KvT* k = k_cache + (slot * num_kv_heads + kv_head) * head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) dot += double(q[d]) * to_float(k[d]);
        scores.push_back(dot * row_scale(p.k_scale, slot * num_kv_heads + kv_head) * p.scale);
        slots.push_back(slot);
        max_score = std::max(max_score, scores.back());
      });
      double denom = p.sinks.defined() ? std::exp(double(p.sinks.data_as<float>()[h]) - max_score) : 0.0;
      for (double& sc : scores) denom += (sc = std::exp(sc - max_score));
      std::vector<double> acc(size_t(head_dim_v), 0.0);
      for (size_t i = 0; i < slots.size(); ++i) {
        const KvT* v = v_cache + (slots[i] * num_kv_heads + kv_head) * v_row;
        const double w = scores[i] / denom * row_scale(v_scales, slots[i] * num_kv_heads + kv_head);
        for (int64_t d = 0; d < head_dim_v; ++d) acc[size_t(d)] += w * to_float(v[d]);
      }
      float* out = p.out.data_as<float>() + (int64_t(row) * num_heads + h) * head_dim_v;
      for (int64_t d = 0; d < head_dim_v; ++d) out[d] = float(acc[size_t(d)]);
    }
  }
}

template <class Keys>
void attend(const PagedAttentionParams& p, const Keys& keys, int32_t q_begin, int32_t q_end) {
  switch (p.k_cache.dtype) {
    case DType::kBF16: attend_rows<uint16_t>(p, keys, q_begin, q_end); return;
    case DType::kF8E4M3: attend_rows<uint8_t>(p, keys, q_begin, q_end); return;
    default: attend_rows<float>(p, keys, q_begin, q_end); return;
  }
}

void check_cache(const PagedAttentionParams& p) {
  const DType t = p.k_cache.dtype;
  DRIFT_CHECK(t == DType::kF32 || t == DType::kBF16 || t == DType::kF8E4M3,
              "cpu attention reads an F32, BF16 or F8E4M3 cache, got {}", p.k_cache.describe());
  DRIFT_CHECK(!p.v_cache.defined() || p.v_cache.dtype == t, "cpu attention: k_cache {} and v_cache {} differ",
              p.k_cache.describe(), p.v_cache.describe());
  const bool fp8 = t == DType::kF8E4M3;
  auto scales_fit = [](const Tensor& scales, const Tensor& cache) {
    return scales.defined() && scales.dtype == DType::kF32 && scales.numel() == cache.numel() / cache.size(3);
  };
  DRIFT_CHECK(!fp8 || (scales_fit(p.k_scale, p.k_cache) && (!p.v_cache.defined() || scales_fit(p.v_scale, p.v_cache))),
              "cpu attention: an F8E4M3 cache needs fp32 k_scale (and v_scale) of one per cached row, got {} and {}",
              p.k_scale.describe(), p.v_scale.describe());
}

}  // namespace

void CpuOps::paged_attention(const PagedAttentionParams& p) {
  const int64_t num_seqs = p.context_lens.size(0);
  const int32_t block_size = int32_t(p.k_cache.size(1));
  const int64_t max_blocks = p.block_tables.size(1);
  const bool view = p.block_positions.defined();
  check_cache(p);
  DRIFT_CHECK(view == p.view_blocks.defined(), "cpu attention: block_positions and view_blocks come together");
  const int32_t* query_start = p.query_start.data_as<int32_t>();
  const int32_t* context_lens = p.context_lens.data_as<int32_t>();
  const int32_t mask_words = p.tree_mask.defined() ? int32_t(p.tree_mask.size(1)) : 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t q_begin = query_start[s], q_end = query_start[s + 1];
    SeqKeys keys;
    keys.table = p.block_tables.data_as<int32_t>() + s * max_blocks;
    keys.block_size = block_size;
    keys.context_len = context_lens[s];
    keys.tree_start = keys.context_len - (q_end - q_begin);
    keys.window = p.sliding_window;
    if (view) {
      keys.block_positions = p.block_positions.data_as<int32_t>() + s * max_blocks;
      keys.entries = p.view_blocks.data_as<int32_t>()[s];
      DRIFT_CHECK_LE(int64_t(keys.entries), max_blocks);
    } else {
      keys.entries = (keys.context_len + block_size - 1) / block_size;
      DRIFT_CHECK_LE(int64_t(keys.context_len), max_blocks * block_size);
    }
    if (mask_words > 0) {
      keys.mask = p.tree_mask.data_as<uint32_t>() + int64_t(q_begin) * mask_words;
      keys.mask_words = mask_words;
    }
    attend(p, keys, q_begin, q_end);
  }
}

void CpuOps::sparse_paged_attention(const SparseAttentionParams& sp) {
  DRIFT_CHECK(sp.k_cache.dtype == DType::kF32 || sp.k_cache.dtype == DType::kBF16,
              "cpu sparse attention reads an F32 or BF16 cache, got {}", sp.k_cache.describe());
  const PagedAttentionParams p{.q = sp.q, .k_cache = sp.k_cache, .v_cache = sp.v_cache, .out = sp.out,
                               .scale = sp.scale, .q_row_stride = sp.q_row_stride};
  const int64_t num_seqs = sp.query_start.size(0) - 1, max_blocks = sp.block_tables.size(1);
  const int32_t* query_start = sp.query_start.data_as<int32_t>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    SelectedKeys keys;
    keys.table = sp.block_tables.data_as<int32_t>() + s * max_blocks;
    keys.top_k = int32_t(sp.selected.size(1));
    keys.selected = sp.selected.data_as<int32_t>() + int64_t(query_start[s]) * keys.top_k;
    keys.block_size = int32_t(sp.k_cache.size(1));
    keys.context_len = keys.top_k;
    if (sp.k_cache.dtype == DType::kBF16) {
      attend_rows<uint16_t>(p, keys, query_start[s], query_start[s + 1]);
    } else {
      attend_rows<float>(p, keys, query_start[s], query_start[s + 1]);
    }
  }
}

}  // namespace drift::backend
