#include "base/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace drift {
namespace {

TEST(DType, Bf16RoundTripIsExactForRepresentableValues) {
  for (float f : {0.0f, 1.0f, -2.5f, 0.15625f, 65504.0f, -1e-20f}) {
    const float r = bf16_to_f32(f32_to_bf16(f));
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(r)), r) << f;
    EXPECT_NEAR(r, f, std::fabs(f) / 128.0f) << f;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
}

TEST(DType, F16MatchesHandComputedBits) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(DType, F16RoundTripOverRandomValues) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  for (int i = 0; i < 20000; ++i) {
    const auto h = uint16_t(bits(rng));
    const float f = f16_to_f32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(DType, F8E4M3MatchesHandComputedValues) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);        // exp 7, mant 0
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);      // largest finite
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(f8e4m3_to_f32(0xc0), -2.0f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
}

TEST(DType, ParsesSafetensorsNames) {
  EXPECT_EQ(parse_safetensors_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(parse_safetensors_dtype("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(parse_safetensors_dtype("I64"), DType::kI64);
  EXPECT_FALSE(parse_safetensors_dtype("F7").has_value());
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
}

TEST(DType, ConvertsIntegersAndFloatsToF32) {
  const int64_t ints[] = {-3, 0, 1 << 20};
  float out[3];
  convert_to_f32(ints, DType::kI64, out, 3);
  EXPECT_EQ(out[0], -3.0f);
  EXPECT_EQ(out[2], float(1 << 20));
  const uint16_t bf[] = {f32_to_bf16(0.5f), f32_to_bf16(-8.0f)};
  convert_to_f32(bf, DType::kBF16, out, 2);
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], -8.0f);
}

}  // namespace
}  // namespace drift
