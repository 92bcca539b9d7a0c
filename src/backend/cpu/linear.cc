// linear (out = x @ w^T + bias) and batched_linear (one such product per head) through OpenBLAS sgemm;
// weights are fp32 on this backend (converted at load).
#include <cblas.h>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

void CpuOps::linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out) {
  DRIFT_CHECK(x.dtype == DType::kF32 && w.dtype == DType::kF32, "cpu linear expects F32, got {} and {}", x.describe(),
              w.describe());
  const int64_t k = w.size(1), n = w.size(0), m = x.numel() / k;
  DRIFT_CHECK_EQ(x.size(-1), k);
  DRIFT_CHECK_EQ(out.numel(), m * n);
  float* o = out.data_as<float>();
  if (m == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, x.data_as<float>(), int(k),
              w.data_as<float>(), int(k), 0.0f, o, int(n));
  if (bias.defined()) {
    const float* b = bias.data_as<float>();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) o[r * n + c] += b[c];
  }
}

void CpuOps::batched_linear(const Tensor& x, const Tensor& w, const Tensor& out) {
  DRIFT_CHECK(x.dtype == DType::kF32 && w.dtype == DType::kF32, "cpu batched_linear expects F32, got {} and {}",
              x.describe(), w.describe());
  const int64_t t = x.size(0), b = x.size(1), k = x.size(2), n = w.size(1);
  DRIFT_CHECK_EQ(w.size(0), b);
  DRIFT_CHECK_EQ(w.size(2), k);
  DRIFT_CHECK_EQ(out.numel(), t * b * n);
  if (t == 0) return;
  // Matrix i reads rows of x and writes rows of out that sit b rows apart: leading dimensions b*k and b*n.
  for (int64_t i = 0; i < b; ++i)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(t), int(n), int(k), 1.0f, x.data_as<float>() + i * k,
                int(b * k), w.data_as<float>() + i * n * k, int(k), 0.0f, out.data_as<float>() + i * n, int(b * n));
}

}  // namespace drift::backend
