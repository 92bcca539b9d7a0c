// The CPU backend's routed experts against a per-token loop in double: DeepSeek's silu(gate) * up without
// biases, and GPT-OSS's clamped SwiGLU with biases and inputs large enough to reach the clamp; and given a
// range of the experts (expert parallelism: first_expert), only the choices of those.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/ops.h"

namespace drift::backend {
namespace {

struct Case {
  int64_t tokens, hidden, ffn, experts, top_k;
  bool biases;
  float limit;    // 0: silu(gate) * up
  float x_scale;  // input magnitude
  int64_t held_first = 0, held = 0;  // the experts the matrices hold: [held_first, held_first + held); 0: all
};

class MoeExpertsTest : public ::testing::TestWithParam<Case> {
 protected:
  std::vector<float> random(int64_t n, float stddev) {
    std::normal_distribution<float> normal(0.0f, stddev);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng_);
    return v;
  }
  Buffer upload(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
    Buffer b = ops_->alloc(DType::kF32, shape);
    ops_->copy_from_host(b.view, v.data());
    return b;
  }

  std::unique_ptr<Ops> ops_ = make_cpu_ops();
  std::mt19937_64 rng_{11};
};

double activation(double gate, double up, float limit, float alpha) {
  if (limit <= 0.0f) return gate / (1.0 + std::exp(-gate)) * up;
  gate = std::min(gate, double(limit));
  up = std::clamp(up, -double(limit), double(limit));
  return (up + 1.0) * gate / (1.0 + std::exp(-alpha * gate));
}

TEST_P(MoeExpertsTest, MatchesAPerTokenLoop) {
  const Case c = GetParam();
  const int64_t t = c.tokens, h = c.hidden, f = c.ffn, e = c.experts, k = c.top_k;
  const auto x = random(t * h, c.x_scale), w1 = random(e * 2 * f * h, 0.3f), w2 = random(e * h * f, 0.3f);
  const auto b1 = c.biases ? random(e * 2 * f, 0.5f) : std::vector<float>();
  const auto b2 = c.biases ? random(e * h, 0.5f) : std::vector<float>();
  std::vector<int32_t> ids;
  std::vector<float> weights = random(t * k, 0.5f);
  for (int64_t i = 0; i < t; ++i) {
    std::vector<int32_t> perm(static_cast<size_t>(e));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    ids.insert(ids.end(), perm.begin(), perm.begin() + k);  // distinct experts per token, as a router gives
  }

  const int64_t first = c.held_first, end = c.held > 0 ? first + c.held : e;
  Buffer bx = upload(x, {t, h}), bw1 = upload(w1, {e, 2 * f, h}), bw2 = upload(w2, {e, h, f});
  Buffer bb1 = c.biases ? upload(b1, {e, 2 * f}) : Buffer(), bb2 = c.biases ? upload(b2, {e, h}) : Buffer();
  Buffer bw = upload(weights, {t, k}), bids = ops_->alloc(DType::kI32, {t, k}), out = ops_->alloc(DType::kF32, {t, h});
  ops_->copy_from_host(bids.view, ids.data());
  MoeExpertsParams p;
  p.x = bx.view;
  p.topk_ids = bids.view;
  p.topk_weights = bw.view;
  p.first_expert = int32_t(first);
  p.w_gate_up = bw1.view.slice(first, end);
  p.b_gate_up = c.biases ? bb1.view.slice(first, end) : Tensor();
  p.w_down = bw2.view.slice(first, end);
  p.b_down = c.biases ? bb2.view.slice(first, end) : Tensor();
  p.out = out.view;
  p.swiglu_limit = c.limit;
  ops_->moe_experts(p);
  std::vector<float> got(static_cast<size_t>(t * h));
  ops_->copy_to_host(got.data(), out.view);

  int64_t clamped = 0;
  for (int64_t i = 0; i < t; ++i) {
    std::vector<double> want(static_cast<size_t>(h), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t ex = ids[size_t(i * k + j)];
      if (ex < first || ex >= end) continue;  // another rank's expert
      std::vector<double> act(static_cast<size_t>(f));
      for (int64_t r = 0; r < f; ++r) {
        double gate = c.biases ? b1[size_t(ex * 2 * f + r)] : 0.0, up = c.biases ? b1[size_t(ex * 2 * f + f + r)] : 0.0;
        for (int64_t d = 0; d < h; ++d) {
          gate += double(w1[size_t((ex * 2 * f + r) * h + d)]) * x[size_t(i * h + d)];
          up += double(w1[size_t((ex * 2 * f + f + r) * h + d)]) * x[size_t(i * h + d)];
        }
        clamped += c.limit > 0.0f && (gate > c.limit || std::fabs(up) > c.limit);
        act[size_t(r)] = activation(gate, up, c.limit, p.swiglu_alpha);
      }
      for (int64_t d = 0; d < h; ++d) {
        double y = c.biases ? b2[size_t(ex * h + d)] : 0.0;
        for (int64_t r = 0; r < f; ++r) y += double(w2[size_t((ex * h + d) * f + r)]) * act[size_t(r)];
        want[size_t(d)] += weights[size_t(i * k + j)] * y;
      }
    }
    for (int64_t d = 0; d < h; ++d)
      EXPECT_NEAR(got[size_t(i * h + d)], want[size_t(d)], 1e-4 * std::max(1.0, std::fabs(want[size_t(d)])))
          << "token " << i << " feature " << d;
  }
  if (c.limit > 0.0f) {
    EXPECT_GT(clamped, 0) << "the inputs never reached the clamp";
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeExpertsTest,
                         ::testing::Values(Case{9, 32, 16, 8, 2, false, 0.0f, 1.0f},    // DeepSeek
                                           Case{7, 64, 32, 8, 4, true, 7.0f, 3.0f},     // GPT-OSS
                                           Case{1, 16, 8, 4, 4, true, 7.0f, 8.0f},      // every expert, one token
                                           Case{9, 32, 16, 8, 2, false, 0.0f, 1.0f, 4, 4},  // rank 1 of 2
                                           Case{7, 64, 32, 8, 4, true, 7.0f, 3.0f, 2, 2}));  // rank 1 of 4

}  // namespace
}  // namespace drift::backend
