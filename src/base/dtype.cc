#include "base/dtype.h"

#include <cmath>
#include <limits>

namespace drift {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  bool is_float;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kF32, "F32", 4, true},     {DType::kF16, "F16", 2, true},     {DType::kBF16, "BF16", 2, true},
    {DType::kF8E4M3, "F8_E4M3", 1, true}, {DType::kF8E5M2, "F8_E5M2", 1, true}, {DType::kF64, "F64", 8, true},
    {DType::kI8, "I8", 1, false},      {DType::kU8, "U8", 1, false},      {DType::kI16, "I16", 2, false},
    {DType::kU16, "U16", 2, false},    {DType::kI32, "I32", 4, false},    {DType::kU32, "U32", 4, false},
    {DType::kI64, "I64", 8, false},    {DType::kU64, "U64", 8, false},    {DType::kBool, "BOOL", 1, false},
};
const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool is_float(DType t) { return info(t).is_float; }

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(float(mant), -24);
  } else if (exp == 31) {
    mag = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(float(mant | 0x400u), int(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &mag, 4);
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: units of 2^-24, round half to even
    float q = a * 16777216.0f;
    return sign | uint16_t(std::nearbyint(q));
  }
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  float scaled = std::nearbyint(m * 2048.0f);  // 11 significant bits
  if (scaled >= 2048.0f) {
    scaled /= 2.0f;
    ++e;
  }
  const uint32_t exp_bits = uint32_t(e - 1 + 15);
  if (exp_bits >= 31) return sign | 0x7c00u;
  return sign | uint16_t(exp_bits << 10) | (uint16_t(scaled) & 0x3ffu);
}

float f8e4m3_to_f32(uint8_t v) {
  // e4m3fn: bias 7, no infinities, 0x7f / 0xff are NaN.
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 0x7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(float(mant), -9);
  return sign * std::ldexp(float(8 + mant), exp - 10);
}

uint8_t f32_to_f8e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | 0x7f;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Subnormals are multiples of 2^-9; a normal value keeps 3 bits below its leading one.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int quantum = a < 0.015625f ? -9 : e - 4;
  const float q = std::ldexp(std::nearbyint(std::ldexp(a, -quantum)), quantum);  // nearbyint: ties to even
  if (q > 448.0f) return sign | 0x7e;
  // Codes 0..8 are q / 2^-9 (code 8 is 2^-6, the smallest normal: exponent 1, mantissa 0).
  if (q < 0.015625f) return sign | uint8_t(std::ldexp(q, 9));
  std::frexp(q, &e);
  const int mant = int(std::ldexp(q, 4 - e)) - 8;  // the significand as 8..15
  return sign | uint8_t((e + 6) << 3) | uint8_t(mant);
}

float f32_row_to_f8e4m3(const float* x, int64_t n, uint8_t* out) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = amax / 448.0f;
  for (int64_t i = 0; i < n; ++i) out[i] = scale > 0.0f ? f32_to_f8e4m3(x[i] / scale) : uint8_t(0);
  return scale;
}

float f8e5m2_to_f32(uint8_t v) { return f16_to_f32(uint16_t(v) << 8); }

void convert_to_f32(const void* src, DType src_type, float* dst, size_t n) {
  auto each = [&](auto load) {
    for (size_t i = 0; i < n; ++i) dst[i] = load(i);
  };
  switch (src_type) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kF16: { auto p = static_cast<const uint16_t*>(src); each([&](size_t i) { return f16_to_f32(p[i]); }); return; }
    case DType::kBF16: { auto p = static_cast<const uint16_t*>(src); each([&](size_t i) { return bf16_to_f32(p[i]); }); return; }
    case DType::kF8E4M3: { auto p = static_cast<const uint8_t*>(src); each([&](size_t i) { return f8e4m3_to_f32(p[i]); }); return; }
    case DType::kF8E5M2: { auto p = static_cast<const uint8_t*>(src); each([&](size_t i) { return f8e5m2_to_f32(p[i]); }); return; }
    case DType::kF64: { auto p = static_cast<const double*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kI8: { auto p = static_cast<const int8_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kU8: case DType::kBool: { auto p = static_cast<const uint8_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kI16: { auto p = static_cast<const int16_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kU16: { auto p = static_cast<const uint16_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kI32: { auto p = static_cast<const int32_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kU32: { auto p = static_cast<const uint32_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kI64: { auto p = static_cast<const int64_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
    case DType::kU64: { auto p = static_cast<const uint64_t*>(src); each([&](size_t i) { return float(p[i]); }); return; }
  }
}

}  // namespace drift
