// Linear and RMSNorm: the two parameterised building blocks every architecture shares.
#pragma once

#include <string>

#include "model/weight_loader.h"

namespace drift::model {

struct Linear {
  backend::Buffer weight;  // [out_features, in_features]
  backend::Buffer bias;    // [out_features] or empty

  // Loads "<prefix>.weight" (and "<prefix>.bias" when has_bias).
  static Expected<Linear> load(WeightLoader& loader, const std::string& prefix, int64_t out_features,
                               int64_t in_features, bool has_bias);
  // Rows of several HF linears stacked into one (e.g. gate_proj and up_proj): one matrix product instead of two.
  static Expected<Linear> load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                       const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias);
  int64_t out_features() const { return weight.view.size(0); }
  void forward(backend::Ops& ops, const Tensor& x, const Tensor& out) const {
    ops.linear(x, weight.view, bias.view, out);
  }
};

struct RmsNorm {
  backend::Buffer weight;  // [hidden]
  float eps = 1e-6f;

  static Expected<RmsNorm> load(WeightLoader& loader, const std::string& name, int64_t hidden, double eps);
  void forward(backend::Ops& ops, const Tensor& x, const Tensor& out) const { ops.rms_norm(x, weight.view, eps, out); }
};

}  // namespace drift::model
