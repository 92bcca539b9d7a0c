// Row-wise ops of the CPU backend: embedding, RMSNorm, RoPE, SwiGLU, add, KV writes, concat.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

namespace {

void check_f32(const Tensor& t, const char* what) {
  DRIFT_CHECK(t.dtype == DType::kF32, "cpu {} expects F32, got {}", what, t.describe());
}

void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

}  // namespace

void CpuOps::embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
  check_f32(table, "embedding");
  const int64_t num_tokens = ids.size(0), hidden = table.size(1), vocab = table.size(0);
  DRIFT_CHECK_EQ(out.numel(), num_tokens * hidden);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t id = ids.data_as<int32_t>()[t];
    DRIFT_CHECK(id >= 0 && id < vocab, "token id {} outside the vocabulary [0, {})", id, vocab);
    std::memcpy(out.data_as<float>() + t * hidden, table.data_as<float>() + int64_t(id) * hidden, size_t(hidden) * 4);
  }
}

void CpuOps::embedding_part(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out) {
  check_f32(table, "embedding_part");
  const int64_t num_tokens = ids.size(0), hidden = table.size(1), rows = table.size(0);
  DRIFT_CHECK_EQ(out.numel(), num_tokens * hidden);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t row = int64_t(ids.data_as<int32_t>()[t]) - first_id;
    float* dst = out.data_as<float>() + t * hidden;
    if (row >= 0 && row < rows) {
      std::memcpy(dst, table.data_as<float>() + row * hidden, size_t(hidden) * 4);
    } else {
      std::fill(dst, dst + hidden, 0.0f);  // another rank's id: its row comes in the all-reduce
    }
  }
}

void CpuOps::rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  check_f32(x, "rms_norm");
  const int64_t n = w.numel(), rows = x.numel() / n;
#pragma omp parallel for if (rows * n >= kMinParallelElements)
  for (int64_t r = 0; r < rows; ++r) rms_norm_row(x.data_as<float>() + r * n, w.data_as<float>(), eps, n, out.data_as<float>() + r * n);
}

void CpuOps::add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  const int64_t n = w.numel(), rows = x.numel() / n;
  DRIFT_CHECK_EQ(residual.numel(), x.numel());
#pragma omp parallel for if (rows * n >= kMinParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    float* res = residual.data_as<float>() + r * n;
    const float* xr = x.data_as<float>() + r * n;
    for (int64_t i = 0; i < n; ++i) res[i] += xr[i];
    rms_norm_row(res, w.data_as<float>(), eps, n, out.data_as<float>() + r * n);
  }
}

void CpuOps::rope(const Tensor& q, const Tensor& k, const Tensor& positions, const RopeParams& p) {
  const int64_t num_tokens = positions.size(0);
  const int32_t half = p.rotary_dim / 2;
  const int64_t max_positions = p.cos_sin.size(0);
  auto rotate = [&](const Tensor& x, int64_t row_stride, int64_t t, const float* cos, const float* sin) {
    const int64_t heads = x.size(1), head_dim = x.size(2);
    const int64_t stride = row_stride > 0 ? row_stride : heads * head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data_as<float>() + t * stride + h * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        const int64_t a = p.interleaved ? 2 * i : i;
        const int64_t b = p.interleaved ? 2 * i + 1 : i + half;
        const float x1 = v[a], x2 = v[b];
        v[a] = x1 * cos[i] - x2 * sin[i];
        v[b] = x2 * cos[i] + x1 * sin[i];
      }
    }
  };
#pragma omp parallel for if (q.numel() >= kMinParallelElements)
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t pos = positions.data_as<int32_t>()[t];
    DRIFT_CHECK(pos >= 0 && pos < max_positions, "position {} outside the RoPE table of {}", pos, max_positions);
    const float* cos = p.cos_sin.data_as<float>() + int64_t(pos) * p.rotary_dim;
    const float* sin = cos + half;
    rotate(q, p.q_row_stride, t, cos, sin);
    if (k.defined()) rotate(k, p.k_row_stride, t, cos, sin);
  }
}

void CpuOps::silu_mul(const Tensor& gate_up, const Tensor& out) {
  const int64_t rows = gate_up.size(0), f = out.size(-1);
  DRIFT_CHECK_EQ(gate_up.size(-1), 2 * f);
#pragma omp parallel for if (rows * f >= kMinParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up.data_as<float>() + r * 2 * f;
    const float* u = g + f;
    float* o = out.data_as<float>() + r * f;
    for (int64_t i = 0; i < f; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void CpuOps::gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  const int64_t row_elems = x.numel() / x.size(0), num_rows = rows.size(0);
  const size_t row_bytes = size_t(row_elems) * dtype_size(x.dtype);
  for (int64_t i = 0; i < num_rows; ++i) {
    const int32_t r = rows.data_as<int32_t>()[i];
    DRIFT_CHECK(r >= 0 && r < x.size(0), "row {} outside [0, {})", r, x.size(0));
    std::memcpy(static_cast<char*>(out.data) + size_t(i) * row_bytes,
                static_cast<const char*>(x.data) + size_t(r) * row_bytes, row_bytes);
  }
}

void CpuOps::scatter_rows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  const int64_t row_elems = out.numel() / out.size(0), num_rows = rows.size(0);
  DRIFT_CHECK_EQ(x.numel(), num_rows * row_elems);
  DRIFT_CHECK(x.dtype == out.dtype, "scatter_rows: x {} and out {} differ", x.describe(), out.describe());
  const size_t row_bytes = size_t(row_elems) * dtype_size(x.dtype);
  for (int64_t i = 0; i < num_rows; ++i) {
    const int32_t r = rows.data_as<int32_t>()[i];
    DRIFT_CHECK(r >= 0 && r < out.size(0), "row {} outside [0, {})", r, out.size(0));
    std::memcpy(static_cast<char*>(out.data) + size_t(r) * row_bytes,
                static_cast<const char*>(x.data) + size_t(i) * row_bytes, row_bytes);
  }
}

void CpuOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  DRIFT_CHECK_EQ(a.numel(), b.numel());
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) out.data_as<float>()[i] = a.data_as<float>()[i] + b.data_as<float>()[i];
}

namespace {

// One token's rows (cache [num_blocks, block_size, heads, width]) of fp32 values into its cache slot in
// `cache`'s dtype: F32, BF16 rounded to nearest even, or F8E4M3 codes with one scale per head row in
// `scales` ([num_blocks, block_size, heads]).
void store_kv_row(const Tensor& cache, const Tensor& scales, int64_t slot, const float* src) {
  const int64_t heads = cache.size(2), width = cache.size(3), n = heads * width;
  if (cache.dtype == DType::kF32) {
    std::memcpy(cache.data_as<float>() + slot * n, src, size_t(n) * 4);
    return;
  }
  if (cache.dtype == DType::kF8E4M3) {
    DRIFT_CHECK(scales.defined() && scales.dtype == DType::kF32 && scales.numel() == cache.numel() / width,
                "cpu write_kv: an F8E4M3 cache {} needs fp32 scales of one per row, got {}", cache.describe(),
                scales.describe());
    for (int64_t h = 0; h < heads; ++h)
      scales.data_as<float>()[slot * heads + h] =
          f32_row_to_f8e4m3(src + h * width, width, cache.data_as<uint8_t>() + slot * n + h * width);
    return;
  }
  DRIFT_CHECK(cache.dtype == DType::kBF16, "cpu write_kv stores F32, BF16 or F8E4M3, the cache is {}", cache.describe());
  uint16_t* dst = cache.data_as<uint16_t>() + slot * n;
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace

void CpuOps::write_kv(const WriteKvParams& p) {
  const int64_t num_tokens = p.slot_mapping.size(0);
  const int64_t k_row = p.k.numel() / p.k.size(0), v_row = p.v.defined() ? p.v.numel() / p.v.size(0) : 0;
  const int64_t k_stride = p.k_row_stride > 0 ? p.k_row_stride : k_row;
  const int64_t v_stride = p.v_row_stride > 0 ? p.v_row_stride : v_row;
  const int64_t num_slots = p.k_cache.size(0) * p.k_cache.size(1);
  DRIFT_CHECK(!p.k_norm_weight.defined() || (!p.v.defined() && p.k_norm_weight.numel() <= k_row),
              "write_kv: a k norm of {} features needs k rows of at least as many ({}) and no v", p.k_norm_weight.numel(),
              k_row);
  std::vector<float> normed;  // a k row with its first features normalised
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t slot = p.slot_mapping.data_as<int32_t>()[t];
    if (slot < 0) continue;
    DRIFT_CHECK_LT(int64_t(slot), num_slots);
    const float* k = p.k.data_as<float>() + t * k_stride;
    if (p.k_norm_weight.defined()) {
      normed.assign(k, k + k_row);
      rms_norm_row(k, p.k_norm_weight.data_as<float>(), p.k_norm_eps, p.k_norm_weight.numel(), normed.data());
      k = normed.data();
    }
    store_kv_row(p.k_cache, p.k_scale, slot, k);
    if (p.v.defined()) store_kv_row(p.v_cache, p.v_scale, slot, p.v.data_as<float>() + t * v_stride);
  }
}

void CpuOps::concat(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t rows = a.size(0), na = a.numel() / rows, nb = b.numel() / rows;
  DRIFT_CHECK_EQ(b.size(0), rows);
  DRIFT_CHECK_EQ(out.numel(), rows * (na + nb));
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out.data_as<float>() + r * (na + nb);
    std::memcpy(o, a.data_as<float>() + r * na, size_t(na) * 4);
    std::memcpy(o + na, b.data_as<float>() + r * nb, size_t(nb) * 4);
  }
}

}  // namespace drift::backend
