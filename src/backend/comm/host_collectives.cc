#include "backend/comm/host_collectives.h"

#include <cstring>

#include "base/check.h"

namespace drift::backend {

namespace {

float load(const void* data, DType dtype, int64_t i) {
  return dtype == DType::kBF16 ? bf16_to_f32(static_cast<const uint16_t*>(data)[i]) : static_cast<const float*>(data)[i];
}

}  // namespace

void check_summable(const Tensor& x) {
  DRIFT_CHECK(x.device == Device::kCpu, "host collectives read host memory, not {}", x.describe());
  DRIFT_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16, "all_reduce of {}: F32 or BF16 only", x.describe());
}

void sum_in_rank_order(std::span<const void* const> parts, const Tensor& x, std::vector<float>& sum) {
  const int64_t n = x.numel();
  sum.assign(size_t(n), 0.0f);
  for (const void* part : parts)
    for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += load(part, x.dtype, i);
}

void store_sum(const std::vector<float>& sum, const Tensor& x) {
  const int64_t n = x.numel();
  if (x.dtype == DType::kF32) {
    std::memcpy(x.data, sum.data(), size_t(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) x.data_as<uint16_t>()[i] = f32_to_bf16(sum[size_t(i)]);
  }
}

void interleave_columns(std::span<const void* const> parts, const Tensor& x, const Tensor& out) {
  DRIFT_CHECK(x.device == Device::kCpu && x.dtype == out.dtype, "all_gather of {} into {}", x.describe(), out.describe());
  const int64_t world = int64_t(parts.size()), cols = x.size(-1), rows = x.numel() / cols;
  DRIFT_CHECK_EQ(out.numel(), rows * cols * world);
  const size_t part_bytes = size_t(cols) * dtype_size(x.dtype);
  for (int64_t r = 0; r < world; ++r) {
    const char* from = static_cast<const char*>(parts[size_t(r)]);
    char* to = static_cast<char*>(out.data) + size_t(r) * part_bytes;
    for (int64_t row = 0; row < rows; ++row)
      std::memcpy(to + size_t(row * world) * part_bytes, from + size_t(row) * part_bytes, part_bytes);
  }
}

}  // namespace drift::backend
