#include "weights/mxfp4.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "weights/safetensors.h"

namespace drift::weights {

float e8m0_to_f32(uint8_t scale) {
  if (scale == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(scale) - 127);
}

void dequantize_mxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, std::span<float> out) {
  for (size_t b = 0; b < scales.size(); ++b) {
    const float scale = e8m0_to_f32(scales[b]);
    const uint8_t* bytes = blocks.data() + b * kMxfp4BlockBytes;
    float* values = out.data() + b * kMxfp4BlockValues;
    for (int64_t i = 0; i < kMxfp4BlockBytes; ++i) {
      values[2 * i] = kFp4E2M1Values[bytes[i] & 0x0f] * scale;
      values[2 * i + 1] = kFp4E2M1Values[bytes[i] >> 4] * scale;
    }
  }
}

Expected<std::vector<float>> dequantize_mxfp4(const TensorInfo& blocks, const TensorInfo& scales,
                                              std::span<const int64_t> shape) {
  if (shape.empty() || shape.back() % kMxfp4BlockValues != 0)
    return invalid_argument(
        fmt::format("MXFP4 tensor '{}': expected shape {} needs a last dimension that is a "
                    "multiple of {}",
                    blocks.name, format_shape(shape), kMxfp4BlockValues));
  std::vector<int64_t> want_scales(shape.begin(), shape.end());
  want_scales.back() /= kMxfp4BlockValues;
  std::vector<int64_t> want_blocks = want_scales;
  want_blocks.push_back(kMxfp4BlockBytes);
  for (const auto& [t, want] :
       {std::pair<const TensorInfo*, const std::vector<int64_t>*>{&blocks, &want_blocks}, {&scales, &want_scales}}) {
    if (t->dtype != DType::kU8)
      return invalid_argument(
          fmt::format("MXFP4 tensor '{}' in {} has dtype {}, expected U8", t->name, t->file, dtype_name(t->dtype)));
    if (t->shape != *want)
      return invalid_argument(fmt::format("MXFP4 tensor '{}' in {} has shape {}, expected {}", t->name, t->file,
                                          format_shape(t->shape), format_shape(*want)));
  }
  std::vector<float> out(size_t(scales.numel() * kMxfp4BlockValues));
  dequantize_mxfp4(std::span(reinterpret_cast<const uint8_t*>(blocks.bytes.data()), blocks.bytes.size()),
                   std::span(reinterpret_cast<const uint8_t*>(scales.bytes.data()), scales.bytes.size()), out);
  return out;
}

}  // namespace drift::weights
