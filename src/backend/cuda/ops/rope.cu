// rope: rotary embedding of q and k in place, from the fp32 cos/sin table, in fp32 arithmetic.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

// grid: num_tokens blocks; the block's threads walk the (head, pair) rotations of one token.
__global__ void rope_kernel(RotaryParams p) {
  const int64_t t = blockIdx.x;
  const int32_t pos = p.positions[t];
  if (pos < 0 || pos >= p.max_positions) return;  // the CPU backend rejects these; leave them unrotated
  const int half = p.rotary_dim / 2;
  const float* cos = p.cos_sin + int64_t(pos) * p.rotary_dim;
  const float* sin = cos + half;
  const int num_heads = p.num_q_heads + (p.k != nullptr ? p.num_k_heads : 0);
  for (int j = threadIdx.x; j < num_heads * half; j += blockDim.x) {
    const int head = j / half, i = j % half;
    bf16* v = head < p.num_q_heads ? p.q + t * p.q_row_stride + int64_t(head) * p.head_dim
                                   : p.k + t * p.k_row_stride + int64_t(head - p.num_q_heads) * p.head_dim;
    const int a = p.interleaved ? 2 * i : i;
    const int b = p.interleaved ? 2 * i + 1 : i + half;
    const float x1 = __bfloat162float(v[a]), x2 = __bfloat162float(v[b]);
    const float c = cos[i], s = sin[i];
    v[a] = __float2bfloat16(x1 * c - x2 * s);
    v[b] = __float2bfloat16(x2 * c + x1 * s);
  }
}

}  // namespace

void run(const RotaryParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  rope_kernel<<<unsigned(p.num_tokens), 128, 0, stream>>>(p);
  DRIFT_CUDA_CHECK_LAUNCH();
}

}  // namespace drift::backend::cuda
