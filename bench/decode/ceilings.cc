#include "ceilings.h"

#include "base/dtype.h"

namespace drift::bench {

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& e : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    e = f32_to_bf16((float(x >> 40) / float(1ull << 24) - 0.5f) * 0.1f);
  }
  return v;
}

Ceilings measure_ceilings(backend::CudaOps& ops) {
  Ceilings c;
  {
    const size_t bytes = size_t(2) << 30;
    auto a = ops.alloc(DType::kU8, {int64_t(bytes)}), b = ops.alloc(DType::kU8, {int64_t(bytes)});
    DRIFT_CUDA_CHECK(cudaMemsetAsync(a.view.data, 1, bytes, ops.stream()));
    const double t = time_on_stream(ops.stream(), 2, 10, [&] {
      DRIFT_CUDA_CHECK(cudaMemcpyAsync(b.view.data, a.view.data, bytes, cudaMemcpyDeviceToDevice, ops.stream()));
    });
    c.bandwidth = 2.0 * double(bytes) / t;
  }
  {
    const int64_t n = 8192;
    auto x = ops.alloc(DType::kBF16, {n, n}), w = ops.alloc(DType::kBF16, {n, n}), out = ops.alloc(DType::kBF16, {n, n});
    ops.copy_from_host(x.view, random_bf16(size_t(n * n), 1).data());
    ops.copy_from_host(w.view, random_bf16(size_t(n * n), 2).data());
    const double t = time_on_stream(ops.stream(), 3, 10, [&] { ops.linear(x.view, w.view, Tensor(), out.view); });
    c.bf16_rate = 2.0 * double(n) * n * n / t;
  }
  ops.synchronize();
  return c;
}

}  // namespace drift::bench
