#include "model/layers/linear.h"

namespace drift::model {

Expected<Linear> Linear::load(WeightLoader& loader, const std::string& prefix, int64_t out_features,
                              int64_t in_features, bool has_bias, LinearSplit split) {
  return load_stacked(loader, {prefix}, {out_features}, in_features, has_bias, split);
}

namespace {

// Loads the weight (and bias) of stacked parts, each part's rows under weight_shards[i]; a column split's
// bias follows its rows, a row split's stays whole.
Expected<Linear> load_parts(WeightLoader& loader, const std::vector<std::string>& prefixes,
                            const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                            LinearSplit split, const std::vector<Shard>& weight_shards, int32_t rank) {
  std::vector<std::string> weight_names, bias_names;
  std::vector<std::vector<int64_t>> weight_shapes, bias_shapes;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    weight_names.push_back(prefixes[i] + ".weight");
    weight_shapes.push_back({out_features[i], in_features});
    bias_names.push_back(prefixes[i] + ".bias");
    bias_shapes.push_back({out_features[i]});
  }
  Linear l;
  l.split = split;
  DRIFT_ASSIGN_OR_RETURN(l.weight, loader.load_stacked(weight_names, weight_shapes, weight_shards));
  if (!has_bias) return l;
  const std::vector<Shard> bias_shards = split == LinearSplit::kColumn ? weight_shards
                                                                       : std::vector<Shard>(prefixes.size());
  DRIFT_ASSIGN_OR_RETURN(l.bias, loader.load_stacked(bias_names, bias_shapes, bias_shards));
  // A row split's bias is added by rank 0 alone, so the all-reduce counts it once. Every rank reads it,
  // so random weights are drawn in the same order on every rank.
  if (split == LinearSplit::kRow && rank != 0) l.bias = {};
  return l;
}

}  // namespace

Expected<Linear> Linear::load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                      LinearSplit split) {
  const backend::Ops& ops = loader.ops();
  return load_stacked(loader, prefixes, out_features, in_features, has_bias, split, ops.rank(), ops.world_size());
}

Expected<Linear> Linear::load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                      LinearSplit split, int32_t rank, int32_t world) {
  // A column split divides the output rows (and the bias with them), a row split the input columns.
  Shard shard;
  if (split != LinearSplit::kNone && world > 1)
    shard = {.dim = split == LinearSplit::kColumn ? 0 : 1, .rank = rank, .world = world};
  return load_parts(loader, prefixes, out_features, in_features, has_bias, split,
                    std::vector<Shard>(prefixes.size(), shard), rank);
}

Expected<Linear> Linear::load_columns(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                                      const std::vector<Shard>& parts) {
  return load_parts(loader, prefixes, out_features, in_features, has_bias, LinearSplit::kColumn, parts, 0);
}

Expected<RmsNorm> RmsNorm::load(WeightLoader& loader, const std::string& name, int64_t hidden, double eps) {
  RmsNorm n;
  n.eps = float(eps);
  DRIFT_ASSIGN_OR_RETURN(n.weight, loader.load(name, {hidden}));
  return n;
}

}  // namespace drift::model
