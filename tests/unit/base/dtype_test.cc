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

// Every finite code decodes and encodes back to itself; NaN stays NaN (the decoder does not keep a NaN's sign).
TEST(DType, F8E4M3RoundTripsAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    const float f = f8e4m3_to_f32(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(f32_to_f8e4m3(f) & 0x7f, 0x7f) << c;
      EXPECT_EQ(f32_to_f8e4m3(-std::fabs(f)), 0xff) << c;
      continue;
    }
    EXPECT_EQ(f32_to_f8e4m3(f), uint8_t(c)) << std::hex << c << " " << f;
  }
}

// Halfway between two neighbouring codes the even code (mantissa bit 0 clear) wins; just off halfway the
// nearer one does. Checked for every adjacent pair of positive finite codes, subnormals included.
TEST(DType, F8E4M3RoundsToNearestEvenBetweenEveryPairOfCodes) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = f8e4m3_to_f32(uint8_t(c)), hi = f8e4m3_to_f32(uint8_t(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both are short binary fractions
    const uint8_t even = (c % 2 == 0) ? uint8_t(c) : uint8_t(c + 1);
    EXPECT_EQ(f32_to_f8e4m3(mid), even) << "between codes " << c << " and " << c + 1;
    EXPECT_EQ(f32_to_f8e4m3(-mid), uint8_t(even | 0x80)) << c;
    EXPECT_EQ(f32_to_f8e4m3(std::nextafter(mid, 0.0f)), uint8_t(c)) << c;
    EXPECT_EQ(f32_to_f8e4m3(std::nextafter(mid, 1000.0f)), uint8_t(c + 1)) << c;
  }
}

TEST(DType, F8E4M3SaturatesAndKeepsSignedZero) {
  EXPECT_EQ(f32_to_f8e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(464.0f), 0x7e);  // halfway to 480 (not a finite code): saturates
  EXPECT_EQ(f32_to_f8e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_f8e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: ties to even 0
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(f32_to_f8e4m3(1e-30f), 0x00);
}

// Against a brute-force nearest search over the finite codes (ties: the even code) for random values.
TEST(DType, F8E4M3MatchesNearestCodeSearch) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> log_mag(-12.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::exp2(log_mag(rng)) * (i % 2 ? -1.0f : 1.0f);
    int best = 0;
    float best_err = INFINITY;
    for (int c = 0; c <= 0x7e; ++c) {
      const float err = std::fabs(std::fabs(f) - f8e4m3_to_f32(uint8_t(c)));
      if (err < best_err || (err == best_err && c % 2 == 0)) best = c, best_err = err;
    }
    EXPECT_EQ(f32_to_f8e4m3(f), uint8_t(best | (f < 0 ? 0x80 : 0))) << f;
  }
}

TEST(DType, F8E4M3RowScaleMapsAmaxTo448) {
  const float x[] = {0.5f, -3.0f, 1.25f, 0.0f};
  uint8_t codes[4];
  const float scale = f32_row_to_f8e4m3(x, 4, codes);
  EXPECT_EQ(scale, 3.0f / 448.0f);
  EXPECT_EQ(codes[1], 0xfe);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f8e4m3_to_f32(codes[i]) * scale, x[i], std::fabs(x[i]) / 16 + 1e-6f) << i;
  const float zeros[] = {0.0f, 0.0f};
  EXPECT_EQ(f32_row_to_f8e4m3(zeros, 2, codes), 0.0f);
  EXPECT_EQ(codes[0], 0);
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
