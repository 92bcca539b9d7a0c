// The CPU backend's expert routing against a straightforward reference for each variant the families use:
// DeepSeek-V2 greedy and group-limited softmax, DeepSeek-V3 sigmoid + correction bias + groups, GPT-OSS
// softmax over the chosen logits. The reference picks by repeated argmax and computes weights in the
// obvious order, so it shares no selection code with the backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/ops.h"

namespace drift::backend {
namespace {

using Scoring = MoeRouteParams::Scoring;

struct Routed {
  std::vector<int32_t> ids;    // [T, k]
  std::vector<float> weights;  // [T, k]
};

// Index of the largest allowed value (the lowest index among equals), then disallows it.
int32_t take_argmax(const std::vector<double>& v, std::vector<bool>& allowed) {
  int32_t best = -1;
  for (size_t i = 0; i < v.size(); ++i)
    if (allowed[i] && (best < 0 || v[i] > v[size_t(best)])) best = int32_t(i);
  allowed[size_t(best)] = false;
  return best;
}

Routed reference(const std::vector<float>& logits, const std::vector<float>& bias, int64_t num_experts, int64_t k,
                 const MoeRouteParams& p) {
  const int64_t num_tokens = int64_t(logits.size()) / num_experts, per_group = num_experts / p.n_group;
  Routed r;
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<double> scores(static_cast<size_t>(num_experts)), choice(static_cast<size_t>(num_experts));
    double denom = 0.0;
    for (int64_t e = 0; e < num_experts; ++e) denom += std::exp(double(logits[size_t(t * num_experts + e)]));
    for (int64_t e = 0; e < num_experts; ++e) {
      const double l = logits[size_t(t * num_experts + e)];
      scores[size_t(e)] = p.scoring == Scoring::kSoftmax ? std::exp(l) / denom : 1.0 / (1.0 + std::exp(-l));
      choice[size_t(e)] = scores[size_t(e)] + (bias.empty() ? 0.0 : bias[size_t(e)]);
    }
    std::vector<bool> allowed(static_cast<size_t>(num_experts), true);
    if (p.n_group > 1) {
      std::vector<double> group_score(static_cast<size_t>(p.n_group), 0.0);
      for (int64_t g = 0; g < p.n_group; ++g) {
        std::vector<bool> in_group(static_cast<size_t>(num_experts), false);
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) in_group[size_t(e)] = true;
        for (int32_t i = 0; i < p.group_score_top; ++i)
          group_score[size_t(g)] += choice[size_t(take_argmax(choice, in_group))];
      }
      std::vector<bool> groups_left(static_cast<size_t>(p.n_group), true);
      std::vector<bool> kept(static_cast<size_t>(p.n_group), false);
      for (int32_t i = 0; i < p.topk_group; ++i) kept[size_t(take_argmax(group_score, groups_left))] = true;
      for (int64_t e = 0; e < num_experts; ++e) allowed[size_t(e)] = kept[size_t(e / per_group)];
    }
    std::vector<int32_t> ids;
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      ids.push_back(take_argmax(choice, allowed));
      sum += scores[size_t(ids.back())];
    }
    for (int32_t id : ids) {
      r.ids.push_back(id);
      const double w = p.renormalize ? scores[size_t(id)] / sum : scores[size_t(id)];
      r.weights.push_back(float(w * p.routed_scaling_factor));
    }
  }
  return r;
}

class MoeRouteTest : public ::testing::Test {
 protected:
  std::vector<float> random(int64_t n, float stddev) {
    std::normal_distribution<float> normal(0.0f, stddev);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng_);
    return v;
  }

  Routed run(const std::vector<float>& logits, const std::vector<float>& bias, int64_t num_experts, int64_t k,
             MoeRouteParams p) {
    const int64_t num_tokens = int64_t(logits.size()) / num_experts;
    Buffer l = ops_->alloc(DType::kF32, {num_tokens, num_experts});
    ops_->copy_from_host(l.view, logits.data());
    Buffer b;
    if (!bias.empty()) {
      b = ops_->alloc(DType::kF32, {num_experts});
      ops_->copy_from_host(b.view, bias.data());
    }
    Buffer ids = ops_->alloc(DType::kI32, {num_tokens, k}), weights = ops_->alloc(DType::kF32, {num_tokens, k});
    p.logits = l.view;
    p.correction_bias = b.view;
    p.topk_ids = ids.view;
    p.topk_weights = weights.view;
    ops_->moe_route(p);
    Routed r;
    r.ids.resize(size_t(num_tokens * k));
    r.weights.resize(size_t(num_tokens * k));
    ops_->copy_to_host(r.ids.data(), ids.view);
    ops_->copy_to_host(r.weights.data(), weights.view);
    return r;
  }

  void check(int64_t num_tokens, int64_t num_experts, int64_t k, const MoeRouteParams& p, bool with_bias) {
    const auto logits = random(num_tokens * num_experts, 2.0f);
    const auto bias = with_bias ? random(num_experts, 0.1f) : std::vector<float>();
    const Routed want = reference(logits, bias, num_experts, k, p);
    const Routed got = run(logits, bias, num_experts, k, p);
    for (int64_t t = 0; t < num_tokens; ++t) {
      // Same experts; the order inside a token's top-k is free, so compare as expert -> weight.
      std::vector<std::pair<int32_t, float>> g, w;
      for (int64_t j = 0; j < k; ++j) {
        g.emplace_back(got.ids[size_t(t * k + j)], got.weights[size_t(t * k + j)]);
        w.emplace_back(want.ids[size_t(t * k + j)], want.weights[size_t(t * k + j)]);
      }
      std::sort(g.begin(), g.end());
      std::sort(w.begin(), w.end());
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(g[size_t(j)].first, w[size_t(j)].first) << "token " << t;
        EXPECT_NEAR(g[size_t(j)].second, w[size_t(j)].second, 1e-6 * std::max(1.0f, std::fabs(w[size_t(j)].second)))
            << "token " << t;
      }
    }
  }

  std::unique_ptr<Ops> ops_ = make_cpu_ops();
  std::mt19937_64 rng_{7};
};

TEST_F(MoeRouteTest, DeepseekV2GreedySoftmax) {
  MoeRouteParams p;  // V2-Lite: softmax, greedy, no renormalisation
  check(37, 64, 6, p, false);
}

TEST_F(MoeRouteTest, DeepseekV2GroupLimitedGreedy) {
  MoeRouteParams p;  // DeepSeek-V2: 8 groups, keep 3 by their best expert, scale 16
  p.n_group = 8;
  p.topk_group = 3;
  p.group_score_top = 1;
  p.routed_scaling_factor = 16.0f;
  check(29, 160 / 4, 6, p, false);
}

TEST_F(MoeRouteTest, DeepseekV3SigmoidBiasGroups) {
  MoeRouteParams p;  // DeepSeek-V3 noaux_tc: groups scored by their best two biased choices
  p.scoring = Scoring::kSigmoid;
  p.n_group = 8;
  p.topk_group = 4;
  p.group_score_top = 2;
  p.renormalize = true;
  p.routed_scaling_factor = 2.5f;
  check(41, 64, 8, p, true);
}

TEST_F(MoeRouteTest, GptOssSoftmaxOverTheChosenLogits) {
  MoeRouteParams p;
  p.renormalize = true;
  const int64_t num_tokens = 13, num_experts = 32, k = 4;
  const auto logits = random(num_tokens * num_experts, 2.0f);
  const Routed got = run(logits, {}, num_experts, k, p);
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<float> row(logits.begin() + t * num_experts, logits.begin() + (t + 1) * num_experts);
    std::vector<float> sorted = row;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    double denom = 0.0;
    for (int64_t j = 0; j < k; ++j) denom += std::exp(double(sorted[size_t(j)] - sorted[0]));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = got.ids[size_t(t * k + j)];
      EXPECT_GE(row[size_t(id)], sorted[size_t(k - 1)]) << "token " << t;
      EXPECT_NEAR(got.weights[size_t(t * k + j)], std::exp(double(row[size_t(id)] - sorted[0])) / denom, 1e-6);
    }
  }
}

TEST_F(MoeRouteTest, CorrectionBiasSteersTheChoiceButNotTheWeight) {
  // 4 experts in 2 groups of 2; expert 3 has the lowest score but a bias that lifts its group and itself.
  MoeRouteParams p;
  p.scoring = Scoring::kSigmoid;
  p.n_group = 2;
  p.topk_group = 1;
  p.group_score_top = 1;
  const std::vector<float> logits = {1.0f, 0.5f, -2.0f, -3.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.9f};
  const Routed got = run(logits, bias, 4, 1, p);
  ASSERT_EQ(got.ids[0], 3);
  EXPECT_NEAR(got.weights[0], 1.0 / (1.0 + std::exp(3.0)), 1e-7);
}

}  // namespace
}  // namespace drift::backend
