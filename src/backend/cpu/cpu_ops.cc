#include "backend/cpu/cpu_ops.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

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

size_t CpuOps::free_memory_bytes() const {
  return size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
}

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace drift::backend
