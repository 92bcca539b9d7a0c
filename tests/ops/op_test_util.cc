#include "op_test_util.h"

#include <cmath>
#include <sstream>

#include "base/dtype.h"

namespace drift::testing {

void CudaOpsTest::SetUp() {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cpu_ = backend::make_cpu_ops();
  auto gpu = backend::make_cuda_ops();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  gpu_ = std::move(gpu).value();
}

std::vector<float> CudaOpsTest::random_values(int64_t n, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(normal(rng_)));
  return v;
}

std::vector<int32_t> CudaOpsTest::random_ints(int64_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> uniform(lo, hi - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = uniform(rng_);
  return v;
}

backend::Buffer CudaOpsTest::cpu_f32(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = cpu_->alloc(DType::kF32, shape);
  EXPECT_EQ(size_t(b.view.numel()), v.size());
  cpu_->copy_from_host(b.view, v.data());
  return b;
}

backend::Buffer CudaOpsTest::cpu_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = cpu_->alloc(DType::kI32, shape);
  EXPECT_EQ(size_t(b.view.numel()), v.size());
  cpu_->copy_from_host(b.view, v.data());
  return b;
}

backend::Buffer CudaOpsTest::gpu_bf16(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = gpu_->alloc(DType::kBF16, shape);
  EXPECT_EQ(size_t(b.view.numel()), v.size());
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
  gpu_->copy_from_host(b.view, bits.data());
  return b;
}

backend::Buffer CudaOpsTest::gpu_f32(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = gpu_->alloc(DType::kF32, shape);
  EXPECT_EQ(size_t(b.view.numel()), v.size());
  gpu_->copy_from_host(b.view, v.data());
  return b;
}

backend::Buffer CudaOpsTest::gpu_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = gpu_->alloc(DType::kI32, shape);
  EXPECT_EQ(size_t(b.view.numel()), v.size());
  gpu_->copy_from_host(b.view, v.data());
  return b;
}

backend::Buffer CudaOpsTest::gpu_poisoned(DType dtype, std::initializer_list<int64_t> shape) {
  backend::Buffer b = gpu_->alloc(dtype, shape);
  const size_t n = size_t(b.view.numel());
  if (dtype == DType::kBF16) {
    std::vector<uint16_t> nan(n, 0x7fc0);
    gpu_->copy_from_host(b.view, nan.data());
  } else {
    EXPECT_EQ(dtype, DType::kF32);
    std::vector<float> nan(n, NAN);
    gpu_->copy_from_host(b.view, nan.data());
  }
  return b;
}

std::vector<float> CudaOpsTest::read_cpu(const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  cpu_->copy_to_host(v.data(), t);
  return v;
}

std::vector<float> CudaOpsTest::read_gpu(const Tensor& t) {
  gpu_->synchronize();
  std::vector<float> v(size_t(t.numel()));
  if (t.dtype == DType::kF32) {
    gpu_->copy_to_host(v.data(), t);
  } else {
    EXPECT_EQ(t.dtype, DType::kBF16);
    std::vector<uint16_t> bits(v.size());
    gpu_->copy_to_host(bits.data(), t);
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(bits[i]);
  }
  return v;
}

std::string Error::describe() const {
  std::ostringstream s;
  s << "rel_l2 " << rel_l2 << ", max_abs " << max_abs << ", non-finite " << non_finite;
  return s.str();
}

Error compare(const std::vector<float>& got, const std::vector<float>& want) {
  Error e;
  EXPECT_EQ(got.size(), want.size());
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.non_finite;
      continue;
    }
    const double d = double(got[i]) - double(want[i]);
    diff2 += d * d;
    ref2 += double(want[i]) * double(want[i]);
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rel_l2 = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return e;
}

::testing::AssertionResult is_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  const Error e = compare(got, want);
  if (got.size() == want.size() && e.non_finite == 0 && e.rel_l2 <= tolerance)
    return ::testing::AssertionSuccess() << e.describe();
  return ::testing::AssertionFailure() << e.describe() << " (tolerance " << tolerance << ")";
}

std::vector<float> rope_table(int64_t max_positions, int64_t d) {
  std::vector<float> table(size_t(max_positions * d));
  for (int64_t p = 0; p < max_positions; ++p)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(d));
      table[size_t(p * d + i)] = float(std::cos(angle));
      table[size_t(p * d + d / 2 + i)] = float(std::sin(angle));
    }
  return table;
}

}  // namespace drift::testing
