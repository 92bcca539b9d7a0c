#include "backend/cpu/cpu_ops.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace drift::backend {

Buffer CpuOps::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor view(nullptr, dtype, shape, Device::kCpu);
  const size_t bytes = (view.nbytes() + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  DRIFT_CHECK(p != nullptr, "host allocation of {} bytes failed", bytes);
  view.data = p;
  return Buffer{std::shared_ptr<void>(p, [](void* q) { std::free(q); }), view};
}

void CpuOps::copy_from_host(const Tensor& dst, const void* src) { std::memcpy(dst.data, src, dst.nbytes()); }

void CpuOps::copy_to_host(void* dst, const Tensor& src) { std::memcpy(dst, src.data, src.nbytes()); }

void CpuOps::copy(const Tensor& src, const Tensor& dst) {
  DRIFT_CHECK_EQ(src.nbytes(), dst.nbytes());
  std::memmove(dst.data, src.data, src.nbytes());
}

Status CpuOps::supports(const AttentionShape& shape) const {
  if (shape.kv_dtype != DType::kF32 && shape.kv_dtype != DType::kBF16)
    return unsupported(fmt::format("the cpu backend keeps the KV cache in F32 or BF16, not {}", dtype_name(shape.kv_dtype)));
  return Status::Ok();
}

size_t CpuOps::free_memory_bytes() const {
  return size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
}

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace drift::backend
