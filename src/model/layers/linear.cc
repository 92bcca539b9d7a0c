#include "model/layers/linear.h"

namespace drift::model {

Expected<Linear> Linear::load(WeightLoader& loader, const std::string& prefix, int64_t out_features,
                              int64_t in_features, bool has_bias, LinearSplit split) {
  return load_stacked(loader, {prefix}, {out_features}, in_features, has_bias, split);
}

Expected<Linear> Linear::load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                      LinearSplit split) {
  const backend::Ops& ops = loader.ops();
  return load_stacked(loader, prefixes, out_features, in_features, has_bias, split, ops.rank(), ops.world_size());
}

Expected<Linear> Linear::load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                      LinearSplit split, int32_t rank, int32_t world) {
  std::vector<std::string> weight_names, bias_names;
  std::vector<std::vector<int64_t>> weight_shapes, bias_shapes;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    weight_names.push_back(prefixes[i] + ".weight");
    weight_shapes.push_back({out_features[i], in_features});
    bias_names.push_back(prefixes[i] + ".bias");
    bias_shapes.push_back({out_features[i]});
  }
  // A column split divides the output rows (and the bias with them), a row split the input columns.
  Shard weight_shard, bias_shard;
  if (split != LinearSplit::kNone && world > 1) {
    weight_shard = {.dim = split == LinearSplit::kColumn ? 0 : 1, .rank = rank, .world = world};
    if (split == LinearSplit::kColumn) bias_shard = weight_shard;
  }
  Linear l;
  l.split = split;
  DRIFT_ASSIGN_OR_RETURN(l.weight, loader.load_stacked(weight_names, weight_shapes, weight_shard));
  // A row split's bias is added by rank 0 alone, so the all-reduce counts it once.
  const bool keeps_bias = has_bias && !(split == LinearSplit::kRow && rank != 0);
  if (keeps_bias) {
    DRIFT_ASSIGN_OR_RETURN(l.bias, loader.load_stacked(bias_names, bias_shapes, bias_shard));
  }
  return l;
}

Expected<RmsNorm> RmsNorm::load(WeightLoader& loader, const std::string& name, int64_t hidden, double eps) {
  RmsNorm n;
  n.eps = float(eps);
  DRIFT_ASSIGN_OR_RETURN(n.weight, loader.load(name, {hidden}));
  return n;
}

}  // namespace drift::model
