// Shared pieces of the CUDA op tests: a fixture holding both backends (skipped without a GPU), random
// inputs already rounded to bf16 (so both backends see identical values), uploads, downloads and an
// error measure. Each test compares the CUDA op with the CPU oracle (contract 6).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/ops.h"

namespace drift::testing {

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override;

  // Normal(0, stddev) values rounded to bf16.
  std::vector<float> random_values(int64_t n, float stddev = 1.0f);
  std::vector<int32_t> random_ints(int64_t n, int32_t lo, int32_t hi);  // uniform in [lo, hi)

  backend::Buffer cpu_f32(const std::vector<float>& v, std::initializer_list<int64_t> shape);
  backend::Buffer cpu_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape);
  backend::Buffer gpu_bf16(const std::vector<float>& v, std::initializer_list<int64_t> shape);
  backend::Buffer gpu_f32(const std::vector<float>& v, std::initializer_list<int64_t> shape);
  backend::Buffer gpu_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape);
  // A GPU buffer filled with NaN, so an element the op forgets to write shows up.
  backend::Buffer gpu_poisoned(DType dtype, std::initializer_list<int64_t> shape);

  std::vector<float> read_cpu(const Tensor& t);
  std::vector<float> read_gpu(const Tensor& t);  // bf16 or f32

  std::unique_ptr<backend::Ops> cpu_;
  std::unique_ptr<backend::Ops> gpu_;
  std::mt19937_64 rng_{12345};
};

// A Llama-style rotary table [max_positions, d] (d / 2 cos values, then d / 2 sin values per position).
std::vector<float> rope_table(int64_t max_positions, int64_t d);

struct Error {
  double rel_l2 = 0.0;   // ||got - want|| / ||want||
  double max_abs = 0.0;  // max |got - want|
  int64_t non_finite = 0;
  std::string describe() const;
};
Error compare(const std::vector<float>& got, const std::vector<float>& want);

// Success when no element is NaN/Inf and the relative L2 error is at most `tolerance`.
::testing::AssertionResult is_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance);
#define EXPECT_CLOSE(got, want, tolerance) EXPECT_TRUE(::drift::testing::is_close(got, want, tolerance))

}  // namespace drift::testing
