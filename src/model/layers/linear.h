// Linear and RMSNorm: the two parameterised building blocks every architecture shares.
#pragma once

#include <string>

#include "model/weight_loader.h"

namespace drift::model {

// How a linear is divided among tensor-parallel ranks (as Megatron-LM does it): a column split keeps the
// rank's share of the output features (q/k/v, gate/up: each rank computes its own heads or columns), a
// row split its share of the input features (o_proj, down_proj: partial sums, all-reduced after).
enum class LinearSplit : uint8_t { kNone, kColumn, kRow };

struct Linear {
  backend::Buffer weight;  // [out_features, in_features] (this rank's share of either under a split)
  backend::Buffer bias;    // [out_features] or empty; a row split keeps it on rank 0 only (added once)
  LinearSplit split = LinearSplit::kNone;

  // Loads "<prefix>.weight" (and "<prefix>.bias" when has_bias): the share of this backend's rank.
  static Expected<Linear> load(WeightLoader& loader, const std::string& prefix, int64_t out_features,
                               int64_t in_features, bool has_bias, LinearSplit split = LinearSplit::kNone);
  // Rows of several HF linears stacked into one (e.g. gate_proj and up_proj): one matrix product instead
  // of two. A column split keeps each part's share.
  static Expected<Linear> load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                       const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                       LinearSplit split = LinearSplit::kNone);
  // The same with the rank given instead of the backend's.
  static Expected<Linear> load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                       const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                       LinearSplit split, int32_t rank, int32_t world);
  // Column-split parts each with its own shard of its output rows (q/k/v where the few kv heads are
  // replicated: k and v split among fewer parts than q).
  static Expected<Linear> load_columns(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                       const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                       const std::vector<Shard>& parts);
  int64_t out_features() const { return weight.view.size(0); }
  // out = x @ weight^T (+ bias). A row split leaves this rank's partial sums in out: the layer output they
  // make is all-reduced by the decoder stream, together with the residual add and norm that follow it.
  void forward(backend::Ops& ops, const Tensor& x, const Tensor& out) const { ops.linear(x, weight.view, bias.view, out); }
};

struct RmsNorm {
  backend::Buffer weight;  // [hidden]
  float eps = 1e-6f;

  static Expected<RmsNorm> load(WeightLoader& loader, const std::string& name, int64_t hidden, double eps);
  void forward(backend::Ops& ops, const Tensor& x, const Tensor& out) const { ops.rms_norm(x, weight.view, eps, out); }
};

}  // namespace drift::model
