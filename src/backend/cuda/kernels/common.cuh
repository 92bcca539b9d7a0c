// Device helpers shared by the kernels: 16-byte bf16 vectors, warp and block reductions.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace drift::backend::cuda {

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Eight bf16 values in one 16-byte register group: the unit of every vectorised load and store.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ void bf16x8_to_float(const uint4& raw, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ uint4 float_to_bf16x8(const float (&v)[8]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  return raw;
}

__device__ __forceinline__ uint4 load16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
// Streamed once (weights): skip L1.
__device__ __forceinline__ uint4 load16_stream(const void* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ void store16(void* p, const uint4& v) { *reinterpret_cast<uint4*>(p) = v; }

// The block's threads copy `bytes` from src to dst in units of Unit (bytes % sizeof(Unit) == 0).
template <class Unit>
__device__ __forceinline__ void block_copy(const void* src, void* dst, int64_t bytes) {
  const Unit* s = reinterpret_cast<const Unit*>(src);
  Unit* d = reinterpret_cast<Unit*>(dst);
  for (int64_t i = threadIdx.x; i < bytes / int64_t(sizeof(Unit)); i += blockDim.x) d[i] = s[i];
}

// The SwiGLU gate, in the form every kernel that applies it shares (so fused and unfused paths agree).
__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

// A routed expert's activation (MoeExpertsParams): silu(gate) * up, or with limit > 0 GPT-OSS's clamped
// form (up' + 1) * g * sigmoid(alpha * g), g = min(gate, limit), up' = clamp(up, -limit, limit).
__device__ __forceinline__ float swiglu(float gate, float up, float limit, float alpha) {
  if (limit > 0.0f) {
    gate = fminf(gate, limit);
    up = fminf(fmaxf(up, -limit), limit);
    return (up + 1.0f) * (gate / (1.0f + __expf(-alpha * gate)));
  }
  return silu(gate) * up;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a group of kWidth consecutive lanes (kWidth a power of two <= 32).
template <int kWidth>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the whole block; `scratch` holds 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = (blockDim.x + 31) / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < num_warps; ++w) total += scratch[w];
  return total;
}

}  // namespace drift::backend::cuda
