// MXFP4 decoding against blocks worked out by hand from the format: E8M0 scales, E2M1 codes, low nibble first.
#include "weights/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "weights/safetensors.h"

namespace drift::weights {
namespace {

TensorInfo u8_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<uint8_t>& bytes) {
  TensorInfo t;
  t.name = name;
  t.dtype = DType::kU8;
  t.shape = std::move(shape);
  t.bytes = std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  t.file = "test.safetensors";
  return t;
}

TEST(Mxfp4, E8M0ScalesArePowersOfTwo) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(126), 0.5f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

TEST(Mxfp4, DecodesOneBlockLowNibbleFirst) {
  std::vector<uint8_t> block(16, 0);
  block[0] = 0x21;  // low 1 -> 0.5, high 2 -> 1.0
  block[1] = 0xf8;  // low 8 -> -0.0, high 15 -> -6.0
  block[2] = 0x7a;  // low 10 -> -1.0, high 7 -> 6.0
  block[15] = 0x53; // low 3 -> 1.5, high 5 -> 3.0
  const std::vector<uint8_t> scale = {128};  // x2
  std::vector<float> out(32, 99.0f);
  dequantize_mxfp4(block, scale, out);
  const std::vector<float> head = {1.0f, 2.0f, -0.0f, -12.0f, -2.0f, 12.0f};
  for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(out[i], head[i]) << i;
  EXPECT_TRUE(std::signbit(out[2]));
  for (size_t i = 6; i < 30; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  EXPECT_EQ(out[30], 3.0f);
  EXPECT_EQ(out[31], 6.0f);
}

TEST(Mxfp4, MatrixIsRowMajorWithOneScalePerBlock) {
  // [2 rows, 64 cols]: 2 blocks per row; block (r, g) holds code 2 (1.0) everywhere except its first value,
  // which holds code 7 (6.0); scale of block (r, g) is 2^(r - g).
  std::vector<uint8_t> blocks(2 * 2 * 16, 0x22), scales(2 * 2);
  for (int r = 0; r < 2; ++r)
    for (int g = 0; g < 2; ++g) {
      blocks[size_t((r * 2 + g) * 16)] = 0x27;
      scales[size_t(r * 2 + g)] = uint8_t(127 + r - g);
    }
  const TensorInfo b = u8_tensor("w_blocks", {2, 2, 16}, blocks), s = u8_tensor("w_scales", {2, 2}, scales);
  auto out = dequantize_mxfp4(b, s, std::vector<int64_t>{2, 64});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 128u);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 64; ++c) {
      const int g = c / 32;
      const float scale = std::ldexp(1.0f, r - g);
      EXPECT_EQ((*out)[size_t(r * 64 + c)], (c % 32 == 0 ? 6.0f : 1.0f) * scale) << r << "," << c;
    }
}

TEST(Mxfp4, ShapeAndDtypeErrorsNameTheTensor) {
  const std::vector<uint8_t> bytes(64, 0), few(4, 0);
  const TensorInfo b = u8_tensor("experts.gate_up_proj_blocks", {2, 2, 16}, bytes);
  const TensorInfo s = u8_tensor("experts.gate_up_proj_scales", {2, 2}, few);
  auto wrong_cols = dequantize_mxfp4(b, s, std::vector<int64_t>{2, 32});
  ASSERT_FALSE(wrong_cols.ok());
  EXPECT_NE(wrong_cols.status().to_string().find("experts.gate_up_proj_blocks"), std::string::npos)
      << wrong_cols.status().to_string();
  auto not_multiple = dequantize_mxfp4(b, s, std::vector<int64_t>{2, 48});
  EXPECT_FALSE(not_multiple.ok());

  TensorInfo f32_scales = s;
  f32_scales.dtype = DType::kF32;
  auto wrong_dtype = dequantize_mxfp4(b, f32_scales, std::vector<int64_t>{2, 64});
  ASSERT_FALSE(wrong_dtype.ok());
  EXPECT_NE(wrong_dtype.status().to_string().find("experts.gate_up_proj_scales"), std::string::npos);
}

}  // namespace
}  // namespace drift::weights
