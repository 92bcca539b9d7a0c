// FP8 (e4m3) KV rows: quantizing a bf16 row with its own scale on write, and decoding codes on read. The
// rule is WriteKvParams': scale = amax / 448 and code = e4m3(x / scale), both fp32 divisions rounded to
// nearest (__fdiv_rn, so a fast-math build cannot change them) and the conversion round-to-nearest-even
// with saturation, the same bits as base/dtype.h's f32_row_to_f8e4m3 on the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/kernels/common.cuh"

namespace drift::backend::cuda {

// One warp quantizes the n bf16 values at src into codes at dst and returns the row's scale (every lane).
__device__ __forceinline__ float quantize_row_fp8(const __nv_bfloat16* src, int n, uint8_t* dst) {
  const int lane = threadIdx.x % 32;
  float amax = 0.0f;
  for (int d = lane; d < n; d += 32) amax = fmaxf(amax, fabsf(__bfloat162float(src[d])));
  amax = warp_max(amax);
  const float scale = __fdiv_rn(amax, 448.0f);
  for (int d = lane; d < n; d += 32) {
    const float x = __bfloat162float(src[d]);
    dst[d] = scale > 0.0f ? uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3)) : uint8_t(0);
  }
  return scale;
}

// Eight e4m3 codes (8 bytes, the low byte first) as floats, exact.
__device__ __forceinline__ void fp8x8_to_float(const uint2& raw, float (&v)[8]) {
  const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const __nv_fp8x2_storage_t pair = __nv_fp8x2_storage_t((words[w] >> (16 * i)) & 0xffffu);
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      v[4 * w + 2 * i] = f.x;
      v[4 * w + 2 * i + 1] = f.y;
    }
  }
}

// Eight codes at src (8-byte aligned) times their row's scale, as eight bf16 values in one 16-byte unit.
__device__ __forceinline__ uint4 dequantize_fp8x8(const uint8_t* src, float scale) {
  float v[8];
  fp8x8_to_float(*reinterpret_cast<const uint2*>(src), v);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] *= scale;
  return float_to_bf16x8(v);
}

}  // namespace drift::backend::cuda
