// Tensor: a non-owning view of contiguous, row-major memory on one device. Ops read and write views;
// who owns the bytes (a weight arena, the KV cache, a step buffer) is decided elsewhere.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "base/check.h"
#include "base/dtype.h"

namespace drift {

enum class Device : uint8_t { kCpu, kCuda };

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* d, DType t, std::initializer_list<int64_t> dims, Device dev = Device::kCpu);

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  // size(-1) is the last dimension.
  int64_t size(int d) const { return shape[size_t(d < 0 ? d + ndim : d)]; }
  template <class T>
  T* data_as() const { return static_cast<T*>(data); }
  // The same bytes seen with another shape of equal element count.
  Tensor view(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) of dimension 0.
  Tensor slice(int64_t begin, int64_t end) const;
  // "[4, 64] BF16"
  std::string describe() const;
};

// Host memory that owns its bytes (64-byte aligned) and hands out a Tensor view of them.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> dims);
  static HostTensor zeros(DType dtype, std::initializer_list<int64_t> dims);

  const Tensor& tensor() const { return view_; }
  Tensor& tensor() { return view_; }
  operator const Tensor&() const { return view_; }
  template <class T>
  T* data_as() const { return view_.data_as<T>(); }
  int64_t numel() const { return view_.numel(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> bytes_;
  Tensor view_;
};

}  // namespace drift
