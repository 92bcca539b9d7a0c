// Mixture-of-experts on the CPU: expert routing in double, written to read like its definition in
// MoeRouteParams, and the routed experts as two matrix products per expert over the tokens it received.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

namespace {

// Indices of the `k` largest values, largest first; ties go to the lower index.
std::vector<int32_t> top_indices(const std::vector<double>& values, const std::vector<int32_t>& candidates, int64_t k) {
  std::vector<int32_t> idx = candidates;
  const auto before = [&](int32_t a, int32_t b) {
    const double va = values[size_t(a)], vb = values[size_t(b)];
    return va > vb || (va == vb && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
  idx.resize(size_t(k));
  return idx;
}

void route_token(const MoeRouteParams& p, int64_t t) {
  const int64_t num_experts = p.logits.size(1), top_k = p.topk_ids.size(1);
  const float* logits = p.logits.data_as<float>() + t * num_experts;
  std::vector<double> scores(static_cast<size_t>(num_experts)), choice(static_cast<size_t>(num_experts));
  if (p.scoring == MoeRouteParams::Scoring::kSoftmax) {
    const double max_logit = *std::max_element(logits, logits + num_experts);
    double sum = 0.0;
    for (int64_t e = 0; e < num_experts; ++e) sum += (scores[size_t(e)] = std::exp(double(logits[e]) - max_logit));
    for (double& s : scores) s /= sum;
  } else {
    for (int64_t e = 0; e < num_experts; ++e) scores[size_t(e)] = 1.0 / (1.0 + std::exp(-double(logits[e])));
  }
  for (int64_t e = 0; e < num_experts; ++e)
    choice[size_t(e)] =
        scores[size_t(e)] + (p.correction_bias.defined() ? double(p.correction_bias.data_as<float>()[e]) : 0.0);

  // Experts of the groups that may compete.
  std::vector<int32_t> candidates(static_cast<size_t>(num_experts));
  std::iota(candidates.begin(), candidates.end(), 0);
  if (p.n_group > 1) {
    const int64_t per_group = num_experts / p.n_group;
    std::vector<double> group_score(static_cast<size_t>(p.n_group), 0.0);
    for (int32_t g = 0; g < p.n_group; ++g) {
      std::vector<int32_t> members(static_cast<size_t>(per_group));
      std::iota(members.begin(), members.end(), int32_t(g * per_group));
      for (int32_t e : top_indices(choice, members, p.group_score_top)) group_score[size_t(g)] += choice[size_t(e)];
    }
    std::vector<int32_t> groups(static_cast<size_t>(p.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    candidates.clear();
    for (int32_t g : top_indices(group_score, groups, p.topk_group))
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) candidates.push_back(int32_t(e));
  }

  const std::vector<int32_t> chosen = top_indices(choice, candidates, top_k);
  double sum = 0.0;
  for (int32_t e : chosen) sum += scores[size_t(e)];
  const double norm = p.renormalize ? 1.0 / (sum + 1e-20) : 1.0;
  for (int64_t j = 0; j < top_k; ++j) {
    p.topk_ids.data_as<int32_t>()[t * top_k + j] = chosen[size_t(j)];
    const double score = scores[size_t(chosen[size_t(j)])];
    p.topk_weights.data_as<float>()[t * top_k + j] = float(score * norm * p.routed_scaling_factor);
  }
}

// y = x @ w^T (+ bias) for n rows: x [n, k], w [m, k], y [n, m].
void matmul(const float* x, const float* w, const float* bias, int64_t n, int64_t m, int64_t k, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(m), int(k), 1.0f, x, int(k), w, int(k), 0.0f, y,
              int(m));
  if (bias)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < m; ++c) y[r * m + c] += bias[c];
}

void gated_activation(const MoeExpertsParams& p, const float* gate_up, int64_t f, float* out) {
  for (int64_t i = 0; i < f; ++i) {
    float gate = p.gate_up_interleaved ? gate_up[2 * i] : gate_up[i];
    float up = p.gate_up_interleaved ? gate_up[2 * i + 1] : gate_up[f + i];
    if (p.swiglu_limit > 0.0f) {
      gate = std::min(gate, p.swiglu_limit);
      up = std::clamp(up, -p.swiglu_limit, p.swiglu_limit);
      out[i] = (up + 1.0f) * (gate / (1.0f + std::exp(-p.swiglu_alpha * gate)));
    } else {
      out[i] = gate / (1.0f + std::exp(-gate)) * up;
    }
  }
}

}  // namespace

void CpuOps::moe_route(const MoeRouteParams& p) {
  const int64_t num_tokens = p.logits.size(0), num_experts = p.logits.size(1);
  check_moe_route(p);
#pragma omp parallel for if (num_tokens * num_experts >= kMinParallelElements / 64)
  for (int64_t t = 0; t < num_tokens; ++t) route_token(p, t);
}

void CpuOps::moe_experts(const MoeExpertsParams& p) {
  const int64_t num_tokens = p.x.size(0), hidden = p.x.size(1), top_k = p.topk_ids.size(1);
  const int64_t num_experts = p.w_gate_up.size(0), ffn = p.w_down.size(2);
  DRIFT_CHECK(p.w_gate_up.dtype == DType::kF32 && p.w_down.dtype == DType::kF32,
              "cpu moe_experts reads fp32 expert matrices, not {} / {} (the loader decodes MXFP4 for this backend)",
              dtype_name(p.w_gate_up.dtype), dtype_name(p.w_down.dtype));
  DRIFT_CHECK_EQ(p.w_gate_up.size(1), 2 * ffn);
  DRIFT_CHECK_EQ(p.w_gate_up.size(2), hidden);
  DRIFT_CHECK_EQ(p.w_down.size(1), hidden);
  DRIFT_CHECK_EQ(p.out.numel(), num_tokens * hidden);
  float* out = p.out.data_as<float>();
  if (p.add.defined()) {
    DRIFT_CHECK_EQ(p.add.numel(), num_tokens * hidden);
    std::copy_n(p.add.data_as<float>(), num_tokens * hidden, out);
  } else {
    std::fill(out, out + num_tokens * hidden, 0.0f);
  }

  // (token, weight) pairs each expert received, so an expert is two matrix products over its tokens.
  std::vector<std::vector<std::pair<int64_t, float>>> assigned(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = p.topk_ids.data_as<int32_t>()[t * top_k + j] - p.first_expert;
      if (e < 0 || e >= num_experts) continue;  // another rank's expert
      assigned[size_t(e)].emplace_back(t, p.topk_weights.data_as<float>()[t * top_k + j]);
    }

  std::vector<float> xs, gate_up, act, ys;
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto& rows = assigned[size_t(e)];
    const int64_t n = int64_t(rows.size());
    if (n == 0) continue;
    xs.resize(size_t(n * hidden));
    gate_up.resize(size_t(n * 2 * ffn));
    act.resize(size_t(n * ffn));
    ys.resize(size_t(n * hidden));
    for (int64_t r = 0; r < n; ++r)
      std::copy_n(p.x.data_as<float>() + rows[size_t(r)].first * hidden, hidden, xs.data() + r * hidden);
    const float* b_gate_up = p.b_gate_up.defined() ? p.b_gate_up.data_as<float>() + e * 2 * ffn : nullptr;
    const float* b_down = p.b_down.defined() ? p.b_down.data_as<float>() + e * hidden : nullptr;
    matmul(xs.data(), p.w_gate_up.data_as<float>() + e * 2 * ffn * hidden, b_gate_up, n, 2 * ffn, hidden,
           gate_up.data());
    for (int64_t r = 0; r < n; ++r) gated_activation(p, gate_up.data() + r * 2 * ffn, ffn, act.data() + r * ffn);
    matmul(act.data(), p.w_down.data_as<float>() + e * hidden * ffn, b_down, n, hidden, ffn, ys.data());
    for (int64_t r = 0; r < n; ++r) {
      float* o = out + rows[size_t(r)].first * hidden;
      const float w = rows[size_t(r)].second;
      for (int64_t i = 0; i < hidden; ++i) o[i] += w * ys[size_t(r * hidden + i)];
    }
  }
}

}  // namespace drift::backend
