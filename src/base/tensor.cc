#include "base/tensor.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace drift {

Tensor::Tensor(void* d, DType t, std::initializer_list<int64_t> dims, Device dev) : data(d), dtype(t), device(dev) {
  DRIFT_CHECK_LE(dims.size(), size_t(kMaxDims));
  ndim = int(dims.size());
  size_t i = 0;
  for (int64_t x : dims) shape[i++] = x;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[size_t(i)];
  return n;
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims, device);
  DRIFT_CHECK_EQ(t.numel(), numel());
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  DRIFT_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "slice [{}, {}) of {}", begin, end, describe());
  Tensor t = *this;
  const size_t row_bytes = nbytes() / size_t(shape[0] ? shape[0] : 1);
  t.data = static_cast<char*>(data) + size_t(begin) * row_bytes;
  t.shape[0] = end - begin;
  return t;
}

std::string Tensor::describe() const {
  return fmt::format("[{}] {}", fmt::join(shape.begin(), shape.begin() + ndim, ", "), dtype_name(dtype));
}

void HostTensor::Free::operator()(void* p) const { std::free(p); }

HostTensor::HostTensor(DType dtype, std::initializer_list<int64_t> dims) {
  view_ = Tensor(nullptr, dtype, dims);
  const size_t bytes = (view_.nbytes() + 63) / 64 * 64;
  bytes_.reset(std::aligned_alloc(64, bytes ? bytes : 64));
  DRIFT_CHECK(bytes_ != nullptr, "host allocation of {} bytes failed", bytes);
  view_.data = bytes_.get();
}

HostTensor HostTensor::zeros(DType dtype, std::initializer_list<int64_t> dims) {
  HostTensor t(dtype, dims);
  std::memset(t.view_.data, 0, t.view_.nbytes());
  return t;
}

}  // namespace drift
