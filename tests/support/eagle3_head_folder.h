// EAGLE-3 head folders written by tests: a config.json and a model.safetensors laid out as SafeAILab and
// SpecForge save heads, with seeded random weights shaped after a target model. A test edits the parts it
// wants broken (a tensor dropped or reshaped, a config field changed) before writing. Folders live under
// the system temp directory and are removed at exit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "model/model.h"

namespace drift::testing {

struct HeadTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;    // what the head holds (already rounded when stored as BF16)
  DType dtype = DType::kF32;    // as stored: F32, BF16 or F16
};

struct HeadFolder {
  nlohmann::json config;
  std::map<std::string, HeadTensor> tensors;  // the floating-point weights
  std::vector<int64_t> d2t;                   // [Vd]; empty: no d2t tensor
  DType d2t_dtype = DType::kI64;

  const std::vector<float>& operator[](const std::string& name) const { return tensors.at(name).values; }
  // Stores every weight as `dtype` (rounding the values the same way).
  void store_as(DType dtype);
  // A fresh folder holding the head; returns its path.
  std::string write() const;
};

// A head for `target`: hidden = the target's, heads/kv heads/head_dim of the target, `ffn` MLP width,
// draft vocabulary `draft_vocab` (d2t maps draft id i to target id 2i + 1 when it fits, else i), no
// capture ids in the config (the default). Matrices Normal(0, 0.1), norms 1 + Normal(0, 0.1); the layer's
// tensors under `prefix` ("midlayer" or "layers.0").
HeadFolder random_head_folder(const model::Model& target, int64_t draft_vocab, int64_t ffn, uint64_t seed,
                              const std::string& prefix = "midlayer");
// A fresh folder holding random_head_folder(target, its vocabulary / 2, 64, seed) for the model in
// `model_dir` (loaded on the CPU for its shapes); its path, or empty after a failed expectation.
std::string write_random_head_for(const std::string& model_dir, uint64_t seed);

}  // namespace drift::testing
