// Element types of stored weights, activations and the KV cache, with the scalar conversions the CPU
// backend and the loaders need. Conversions are exact where the format allows (bf16/fp16/fp8 -> fp32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace drift {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kF64, kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kBool };

// Bytes per element.
size_t dtype_size(DType t);
// "F32", "BF16", ... as safetensors spells them.
std::string_view dtype_name(DType t);
std::optional<DType> parse_safetensors_dtype(std::string_view name);
bool is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f8e4m3_to_f32(uint8_t v);
// e4m3fn (OCP FP8, as the KV cache and FP8 checkpoints store it): round to nearest even, finite values and
// infinities beyond +-448 saturate to +-448 (0x7e / 0xfe, as CUDA's __NV_SATFINITE), NaN stays NaN (0x7f /
// 0xff). Values below the smallest subnormal (2^-9) round to a signed zero.
uint8_t f32_to_f8e4m3(float f);
// An FP8 KV cache row: scale = amax(|x|) / 448 (fp32 division), out[i] = f32_to_f8e4m3(x[i] / scale), so
// the row's largest value lands on +-448 and x[i] ~ f8e4m3_to_f32(out[i]) * scale. Returns the scale; a
// row of zeros gets scale 0 and zero codes. NaNs are skipped by the amax (fmax) and stay NaN.
float f32_row_to_f8e4m3(const float* x, int64_t n, uint8_t* out);
float f8e5m2_to_f32(uint8_t v);

// Converts `n` elements of type `src_type` at `src` to fp32 (floats and integers).
void convert_to_f32(const void* src, DType src_type, float* dst, size_t n);

}  // namespace drift
