// CublasLt: the cuBLASLt handle, its workspace and one cached plan (descriptors, layouts, algorithm) per
// GEMM shape. The first call of a shape asks the heuristic (host work only, so it may even happen
// inside a graph capture); later calls only launch. Skinny products of large weights (m at most
// autotune_max_m rows: decode batches, verify steps), where the heuristic's first pick is often not the
// fastest, time the heuristic's best few on their first call outside a capture and keep the fastest. Not
// thread-safe: one per stream.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

namespace drift::backend::cuda {

class CublasLt {
 public:
  // workspace: device memory the algorithms may use, owned by the caller.
  CublasLt(void* workspace, size_t workspace_bytes, int num_sms, int64_t autotune_max_m = 0);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // Row-major shapes and strides of out_i[m, n] = x_i[m, k] @ w_i[n, k]^T (+ bias[n]), i < batch.
  struct Shape {
    int64_t m = 0, n = 0, k = 0;
    int64_t ld_x = 0, ld_w = 0, ld_out = 0;  // elements between rows
    int32_t batch = 1;
    int64_t stride_x = 0, stride_w = 0, stride_out = 0;  // elements between batch entries
    bool out_f32 = false;  // fp32 output (logits), else bf16
    bool operator==(const Shape&) const = default;
  };
  // bf16 operands, fp32 accumulation. A bias with an fp32 out is not supported here (the caller adds it).
  void matmul(const Shape& shape, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out,
              cudaStream_t stream);
  int num_sms() const { return num_sms_; }

 private:
  struct Key {
    Shape shape;
    bool bias;
    int32_t alignment;  // bytes every operand pointer is aligned to (up to 256)
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Plan;
  Plan& plan(const Key& key);
  // Times each candidate algorithm of `p` on this product and keeps the fastest (the stream is synchronised).
  void tune(Plan& p, const __nv_bfloat16* x, const __nv_bfloat16* w, void* out, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  int num_sms_;
  int64_t autotune_max_m_;
  std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> plans_;
};

}  // namespace drift::backend::cuda
