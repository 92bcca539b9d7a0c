// MXFP4 (OCP microscaling FP4), the format gpt-oss checkpoints keep their expert matrices in: each run of
// 32 consecutive values of a row shares one E8M0 scale byte (2^(byte - 127)), and each value is an FP4 E2M1
// code (bit 3 the sign, bits 0-2 the magnitude), two codes per byte with the even element in the low nibble.
// Checkpoints name a matrix [..., rows, cols] "<name>_blocks" [..., rows, cols/32, 16] u8 and
// "<name>_scales" [..., rows, cols/32] u8.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "drift/status.h"

namespace drift::weights {

struct TensorInfo;

inline constexpr int64_t kMxfp4BlockValues = 32;
inline constexpr int64_t kMxfp4BlockBytes = 16;

// FP4 E2M1 value of each 4-bit code.
inline constexpr std::array<float, 16> kFp4E2M1Values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// E8M0 scale byte -> 2^(byte - 127); 255 is NaN, as the OCP format defines it.
float e8m0_to_f32(uint8_t scale);

// Decodes scales.size() blocks: blocks holds 16 bytes per block, out receives 32 values per block.
void dequantize_mxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, std::span<float> out);

// Checks that `blocks` and `scales` (named in messages) hold a matrix of `shape` ([..., rows, cols], cols a
// multiple of 32) and returns it decoded to fp32, row-major.
Expected<std::vector<float>> dequantize_mxfp4(const TensorInfo& blocks, const TensorInfo& scales,
                                              std::span<const int64_t> shape);

}  // namespace drift::weights
