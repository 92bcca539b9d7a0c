// MXFP4 (weights/mxfp4.h) decoded in registers, straight into tensor-core operands.
//
// E2M1 code bits (sign, e1, e0, m) placed at bf16 bits 15 and 8..6 give a bf16 equal to the code's value
// times 2^-126 (e = 0 lands on the subnormal 0.5 * 2^-126, as E2M1's own subnormal): two shifts and a mask
// per pair of codes, no table. The block's E8M0 scale s then multiplies by 2^(s - 1), a power of two, so the
// product is exact: code value * 2^(s - 127). Scale bytes above 128 (blocks scaled by more than 2) overflow
// the bf16 factor; checkpoints keep expert scales well below 1.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace drift::backend::cuda {

// Codes j and j + 4 of the 32-bit word `w` (code i in bits 4i..4i+3) as a bf16x2 (code j in the low half),
// each times 2^-126.
template <int kJ>
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t w) {
  static_assert(kJ >= 0 && kJ < 4);
  const uint32_t sign = (w << (12 - 4 * kJ)) & 0x80008000u;
  uint32_t magnitude;
  if constexpr (kJ < 2)
    magnitude = w << (6 - 4 * kJ);
  else
    magnitude = w >> (4 * kJ - 6);
  return sign | (magnitude & 0x01C001C0u);
}

// The bf16x2 factor 2^(s - 1) in both halves, which turns e2m1_pair's values into code * 2^(s - 127).
__device__ __forceinline__ uint32_t e8m0_factor(uint32_t s) {
  const uint32_t bits = (s + 126u) << 7;
  return bits | (bits << 16);
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r =
      __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// The bf16x2 (low half of a, low half of b), or (high half of a, high half of b) when kHigh.
template <bool kHigh>
__device__ __forceinline__ uint32_t pair_halves(uint32_t a, uint32_t b) {
  return __byte_perm(a, b, kHigh ? 0x7632 : 0x5410);
}

}  // namespace drift::backend::cuda
