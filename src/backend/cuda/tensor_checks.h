// The checks every CudaOps entry point makes on the tensors it is given (programmer errors: they abort with
// the value printed), and the typed pointers it hands to the launchers.
#pragma once

#include "backend/cuda/ops/launch.h"
#include "base/tensor.h"

namespace drift::backend::cuda {

inline void check_device(const Tensor& t, const char* what) {
  DRIFT_CHECK(t.device == Device::kCuda, "cuda {}: tensor {} is not on the GPU", what, t.describe());
}

inline void check_dtype(const Tensor& t, DType want, const char* what) {
  check_device(t, what);
  DRIFT_CHECK(t.dtype == want, "cuda {} expects {}, got {}", what, dtype_name(want), t.describe());
}

inline const bf16* bf16_ptr(const Tensor& t) { return static_cast<const bf16*>(t.data); }
inline bf16* bf16_mut(const Tensor& t) { return static_cast<bf16*>(t.data); }
inline const int32_t* i32_ptr(const Tensor& t) { return static_cast<const int32_t*>(t.data); }

}  // namespace drift::backend::cuda
