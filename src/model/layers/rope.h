// RoPE tables: inverse frequencies for each scaling rule of the Hugging Face configs (default, linear,
// llama3, yarn), turned into a [max_positions, rotary_dim] cos|sin table the rope op reads.
#pragma once

#include <vector>

#include "drift/status.h"
#include "weights/model_config.h"

namespace drift::model {

struct RopeFrequencies {
  std::vector<float> inv_freq;   // [rotary_dim / 2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (YaRN's mscale)
};

Expected<RopeFrequencies> rope_frequencies(const weights::RopeConfig& rope, int64_t rotary_dim,
                                           int64_t max_position_embeddings);

// Host table [max_positions, rotary_dim]: per position rotary_dim/2 cos values, then rotary_dim/2 sin values.
std::vector<float> rope_cos_sin_table(const RopeFrequencies& f, int64_t max_positions);

}  // namespace drift::model
