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
  const DType t = shape.kv_dtype;
  if (t != DType::kF32 && t != DType::kBF16 && t != DType::kF8E4M3)
    return unsupported(fmt::format("the cpu backend keeps the KV cache in F32, BF16 or F8_E4M3, not {}", dtype_name(t)));
  if (t == DType::kF8E4M3 && shape.sparse_top_k > 0)
    return unsupported("DSA-lite sparse attention (indexer_topk, sparse_paged_attention) reads no F8_E4M3 KV cache; "
                       "use --kv-cache-dtype bf16 or f32");
  return Status::Ok();
}

size_t CpuOps::free_memory_bytes() const {
  return size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
}

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace drift::backend
