#include "model/layers/linear.h"

namespace drift::model {

Expected<Linear> Linear::load(WeightLoader& loader, const std::string& prefix, int64_t out_features,
                              int64_t in_features, bool has_bias) {
  return load_stacked(loader, {prefix}, {out_features}, in_features, has_bias);
}

Expected<Linear> Linear::load_stacked(WeightLoader& loader, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias) {
  std::vector<std::string> weight_names, bias_names;
  std::vector<std::vector<int64_t>> weight_shapes, bias_shapes;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    weight_names.push_back(prefixes[i] + ".weight");
    weight_shapes.push_back({out_features[i], in_features});
    bias_names.push_back(prefixes[i] + ".bias");
    bias_shapes.push_back({out_features[i]});
  }
  Linear l;
  DRIFT_ASSIGN_OR_RETURN(l.weight, loader.load_stacked(weight_names, weight_shapes));
  if (has_bias) {
    DRIFT_ASSIGN_OR_RETURN(l.bias, loader.load_stacked(bias_names, bias_shapes));
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
