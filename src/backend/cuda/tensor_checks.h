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

// What paged_attention and sparse_paged_attention (ops.h) share: the queries, the caches, the output and
// the sequences' block tables. Shapes as PagedAttentionParams.
struct CacheAttention {
  Tensor q, k_cache, v_cache, out, block_tables, query_start;
  Tensor k_scale, v_scale;  // FP8 caches: [num_blocks, block_size, num_kv_heads] fp32, one per row
  int64_t q_row_stride = 0;
  float scale = 1.0f;
};
// Their checks (`op` names the caller in messages) and the kernel parameters they fill (num_splits 1).
AttentionParams cache_attention_params(const CacheAttention& c, const char* op);

}  // namespace drift::backend::cuda
