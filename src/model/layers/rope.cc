#include "model/layers/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

namespace drift::model {

namespace {

// Mirrors transformers: the exponent is computed in fp32, as torch.arange(0, dim, 2).float() / dim.
std::vector<float> default_inv_freq(double theta, int64_t dim) {
  std::vector<float> inv(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = float(2 * i) / float(dim);
    inv[size_t(i)] = float(1.0 / std::pow(theta, double(exponent)));
  }
  return inv;
}

void apply_llama3(const weights::RopeConfig& r, std::vector<float>& inv) {
  const double old_len = double(r.original_max_position_embeddings);
  const double low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = float(f / r.factor);
      continue;
    }
    const double smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    f = float((1.0 - smooth) * f / r.factor + smooth * f);
  }
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

float apply_yarn(const weights::RopeConfig& r, int64_t dim, int64_t max_position_embeddings, std::vector<float>& inv) {
  const double original = r.original_max_position_embeddings > 0 ? double(r.original_max_position_embeddings)
                                                                  : double(max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(r.theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float ramp = std::clamp(float((float(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float extrapolation = inv[size_t(i)];
    const float interpolation = float(extrapolation / r.factor);
    inv[size_t(i)] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  if (r.attention_factor) return float(*r.attention_factor);
  if (r.mscale != 0.0 && r.mscale_all_dim != 0.0)
    return float(yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim));
  return float(yarn_mscale(r.factor, 1.0));
}

}  // namespace

Expected<RopeFrequencies> rope_frequencies(const weights::RopeConfig& rope, int64_t rotary_dim,
                                           int64_t max_position_embeddings) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0)
    return invalid_argument(fmt::format("rotary dimension must be positive and even, got {}", rotary_dim));
  RopeFrequencies f{default_inv_freq(rope.theta, rotary_dim), 1.0f};
  switch (rope.type) {
    case weights::RopeType::kDefault:
      break;
    case weights::RopeType::kLinear:
      for (float& x : f.inv_freq) x = float(x / rope.factor);
      break;
    case weights::RopeType::kLlama3:
      apply_llama3(rope, f.inv_freq);
      break;
    case weights::RopeType::kYarn:
      f.attention_scaling = apply_yarn(rope, rotary_dim, max_position_embeddings, f.inv_freq);
      break;
    case weights::RopeType::kDynamic:
      return unsupported("rope_type 'dynamic' (dynamic NTK scaling) is not supported; supported: default, linear, llama3, yarn");
  }
  return f;
}

std::vector<float> rope_cos_sin_table(const RopeFrequencies& f, int64_t max_positions) {
  const size_t half = f.inv_freq.size(), dim = 2 * half;
  std::vector<float> table(size_t(max_positions) * dim);
  for (int64_t pos = 0; pos < max_positions; ++pos) {
    float* row = table.data() + size_t(pos) * dim;
    for (size_t i = 0; i < half; ++i) {
      const float angle = f.inv_freq[i] * float(pos);  // fp32 product, as transformers computes it
      row[i] = float(std::cos(double(angle))) * f.attention_scaling;
      row[half + i] = float(std::sin(double(angle))) * f.attention_scaling;
    }
  }
  return table;
}

}  // namespace drift::model
