// The CUDA mixture-of-experts ops against the CPU oracle: routing in GPT-OSS's and DeepSeek's variants
// (ids exactly, weights to fp32 rounding), and MXFP4 experts (the CPU gets the same codes decoded to fp32)
// at batch 1, odd token counts, experts that get no token, every token on one expert, and prefill sizes.
#include <algorithm>
#include <numeric>

#include "op_test_util.h"
#include "weights/mxfp4.h"

namespace drift::testing {
namespace {

struct ExpertsCase {
  const char* name;
  int64_t tokens, hidden, ffn, experts, top_k;
  int32_t used_experts;  // choices drawn from the first this-many experts (fewer: experts with no token)
  bool interleaved;
  float swiglu_limit;
};

// top_k distinct random experts from [0, used) per token (top_k <= used), weights positive summing to 1.
void draw_choices(std::mt19937_64& rng, const ExpertsCase& c, std::vector<int32_t>& ids, std::vector<float>& weights) {
  std::vector<int32_t> order(static_cast<size_t>(c.used_experts));
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    float sum = 0.0f;
    std::vector<float> w(static_cast<size_t>(c.top_k));
    for (float& x : w) sum += (x = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng));
    for (int64_t j = 0; j < c.top_k; ++j) {
      ids.push_back(order[size_t(j)]);
      weights.push_back(w[size_t(j)] / sum);
    }
  }
}

class CudaMoeTest : public CudaOpsTest {
 protected:
  backend::Buffer gpu_u8(const std::vector<uint8_t>& v, std::initializer_list<int64_t> shape) {
    backend::Buffer b = gpu_->alloc(DType::kU8, shape);
    EXPECT_EQ(size_t(b.view.numel()), v.size());
    gpu_->copy_from_host(b.view, v.data());
    return b;
  }
  std::vector<uint8_t> random_bytes(int64_t n, int lo, int hi) {
    std::vector<uint8_t> v(static_cast<size_t>(n));
    for (uint8_t& b : v) b = uint8_t(std::uniform_int_distribution<int>(lo, hi - 1)(rng_));
    return v;
  }
  std::vector<int32_t> read_gpu_i32(const Tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    gpu_->copy_to_host(v.data(), t);
    return v;
  }
  void expect_experts_match(const ExpertsCase& c);
};

struct RouteCase {
  const char* name;
  int64_t tokens, experts, top_k;
  backend::MoeRouteParams rule;
  bool correction_bias;
};

backend::MoeRouteParams rule(backend::MoeRouteParams::Scoring scoring, int32_t groups, int32_t kept, int32_t top,
                             bool renormalize, float scale) {
  backend::MoeRouteParams r;
  r.scoring = scoring;
  r.n_group = groups;
  r.topk_group = kept;
  r.group_score_top = top;
  r.renormalize = renormalize;
  r.routed_scaling_factor = scale;
  return r;
}

TEST_F(CudaMoeTest, RoutingMatchesTheCpu) {
  using Scoring = backend::MoeRouteParams::Scoring;
  const RouteCase cases[] = {
      {"gpt-oss 32 experts top-4", 37, 32, 4, rule(Scoring::kSoftmax, 1, 1, 1, true, 1.0f), false},
      {"gpt-oss 128 experts top-4", 5, 128, 4, rule(Scoring::kSoftmax, 1, 1, 1, true, 1.0f), false},
      {"deepseek-v2 softmax, groups by max", 19, 64, 6, rule(Scoring::kSoftmax, 8, 3, 1, false, 1.0f), false},
      {"deepseek-v3 sigmoid + bias, groups by top-2", 23, 256, 8, rule(Scoring::kSigmoid, 8, 4, 2, true, 2.5f), true},
  };
  for (const RouteCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> logits = random_values(c.tokens * c.experts, 2.0f);
    const std::vector<float> bias = random_values(c.experts, 0.1f);
    backend::Buffer cpu_logits = cpu_f32(logits, {c.tokens, c.experts}), gpu_logits = gpu_f32(logits, {c.tokens, c.experts});
    backend::Buffer cpu_bias = cpu_f32(bias, {c.experts}), gpu_bias = gpu_f32(bias, {c.experts});
    backend::Buffer cpu_ids = cpu_->alloc(DType::kI32, {c.tokens, c.top_k});
    backend::Buffer cpu_w = cpu_->alloc(DType::kF32, {c.tokens, c.top_k});
    backend::Buffer gpu_ids = gpu_i32(std::vector<int32_t>(size_t(c.tokens * c.top_k), -7), {c.tokens, c.top_k});
    backend::Buffer gpu_w = gpu_poisoned(DType::kF32, {c.tokens, c.top_k});
    backend::MoeRouteParams p = c.rule;
    p.logits = cpu_logits.view;
    p.correction_bias = c.correction_bias ? cpu_bias.view : Tensor();
    p.topk_ids = cpu_ids.view;
    p.topk_weights = cpu_w.view;
    cpu_->moe_route(p);
    p.logits = gpu_logits.view;
    p.correction_bias = c.correction_bias ? gpu_bias.view : Tensor();
    p.topk_ids = gpu_ids.view;
    p.topk_weights = gpu_w.view;
    gpu_->moe_route(p);
    const std::vector<int32_t> want_ids(cpu_ids.view.data_as<int32_t>(), cpu_ids.view.data_as<int32_t>() + cpu_ids.view.numel());
    EXPECT_EQ(read_gpu_i32(gpu_ids.view), want_ids);
    EXPECT_CLOSE(read_gpu(gpu_w.view), read_cpu(cpu_w.view), 1e-5);
  }
}

TEST_F(CudaMoeTest, Mxfp4ExpertsMatchTheCpu) {
  const ExpertsCase cases[] = {
      {"batch 1", 1, 128, 192, 8, 4, 8, true, 7.0f},
      {"3 tokens, gate rows first, plain SwiGLU", 3, 128, 64, 8, 2, 8, false, 0.0f},
      {"17 tokens, 4 of 16 experts used", 17, 192, 128, 16, 4, 4, true, 7.0f},
      {"every token on one expert", 29, 64, 64, 8, 1, 1, true, 7.0f},
      {"64 tokens (two n-tiles)", 64, 128, 128, 32, 4, 32, true, 7.0f},
      {"300 tokens (prefill tiles)", 300, 256, 192, 8, 4, 8, true, 7.0f},
      {"prefill, 2 of 8 experts", 101, 128, 128, 8, 2, 2, false, 7.0f},
  };
  for (const ExpertsCase& c : cases) {
    SCOPED_TRACE(c.name);
    expect_experts_match(c);
    if (HasFailure()) return;
  }
}

void CudaMoeTest::expect_experts_match(const ExpertsCase& c) {
  CudaMoeTest& t = *this;
  const int64_t e = c.experts, h = c.hidden, f = c.ffn, n = c.tokens;
  const std::vector<uint8_t> gu_codes = t.random_bytes(e * 2 * f * h / 2, 0, 256);
  const std::vector<uint8_t> gu_scales = t.random_bytes(e * 2 * f * h / 32, 119, 125);
  const std::vector<uint8_t> dn_codes = t.random_bytes(e * h * f / 2, 0, 256);
  const std::vector<uint8_t> dn_scales = t.random_bytes(e * h * f / 32, 119, 125);
  std::vector<float> gu(size_t(e * 2 * f * h)), dn(size_t(e * h * f));
  weights::dequantize_mxfp4(gu_codes, gu_scales, gu);
  weights::dequantize_mxfp4(dn_codes, dn_scales, dn);
  const std::vector<float> x = t.random_values(n * h), b_gu = t.random_values(e * 2 * f, 0.1f), b_dn = t.random_values(e * h, 0.1f);
  std::vector<int32_t> ids;
  std::vector<float> weights;
  draw_choices(t.rng_, c, ids, weights);

  backend::MoeExpertsParams p;
  p.gate_up_interleaved = c.interleaved;
  p.swiglu_limit = c.swiglu_limit;
  backend::Buffer cx = t.cpu_f32(x, {n, h}), cids = t.cpu_i32(ids, {n, c.top_k}), cw = t.cpu_f32(weights, {n, c.top_k});
  backend::Buffer cgu = t.cpu_f32(gu, {e, 2 * f, h}), cdn = t.cpu_f32(dn, {e, h, f});
  backend::Buffer cbgu = t.cpu_f32(b_gu, {e, 2 * f}), cbdn = t.cpu_f32(b_dn, {e, h});
  backend::Buffer cout = t.cpu_->alloc(DType::kF32, {n, h});
  p.x = cx.view, p.topk_ids = cids.view, p.topk_weights = cw.view, p.w_gate_up = cgu.view, p.w_down = cdn.view;
  p.b_gate_up = cbgu.view, p.b_down = cbdn.view, p.out = cout.view;
  t.cpu_->moe_experts(p);

  const backend::MoeShape shape{.hidden = h, .ffn = f, .num_experts = e, .top_k = c.top_k, .mxfp4 = true};
  ASSERT_TRUE(t.gpu_->supports(shape).ok());
  backend::Buffer gx = t.gpu_bf16(x, {n, h}), gids = t.gpu_i32(ids, {n, c.top_k}), gw = t.gpu_f32(weights, {n, c.top_k});
  backend::Buffer ggu = t.gpu_u8(gu_codes, {e, 2 * f, h / 2}), ggus = t.gpu_u8(gu_scales, {e, 2 * f, h / 32});
  backend::Buffer gdn = t.gpu_u8(dn_codes, {e, h, f / 2}), gdns = t.gpu_u8(dn_scales, {e, h, f / 32});
  backend::Buffer gbgu = t.gpu_bf16(b_gu, {e, 2 * f}), gbdn = t.gpu_bf16(b_dn, {e, h});
  backend::Buffer gout = t.gpu_poisoned(DType::kBF16, {n, h});
  backend::Buffer work = t.gpu_->alloc(DType::kU8, {int64_t(t.gpu_->moe_workspace_bytes(shape, n))});
  p.x = gx.view, p.topk_ids = gids.view, p.topk_weights = gw.view, p.w_gate_up = ggu.view, p.w_down = gdn.view;
  p.w_gate_up_scales = ggus.view, p.w_down_scales = gdns.view, p.b_gate_up = gbgu.view, p.b_down = gbdn.view;
  p.out = gout.view, p.workspace = work.view;
  t.gpu_->moe_experts(p);
  // bf16 inputs to each product (x, the activation) and a bf16 output: a few bf16 roundings deep.
  EXPECT_CLOSE(t.read_gpu(gout.view), t.read_cpu(cout.view), 1.5e-2);
}

TEST_F(CudaMoeTest, RefusesExpertsItCannotRun) {
  EXPECT_FALSE(gpu_->supports(backend::MoeShape{.hidden = 64, .ffn = 64, .num_experts = 8, .top_k = 2}).ok());
  EXPECT_FALSE(
      gpu_->supports(backend::MoeShape{.hidden = 96, .ffn = 64, .num_experts = 8, .top_k = 2, .mxfp4 = true}).ok());
  EXPECT_TRUE(gpu_->reads_weight_format(backend::WeightFormat::kMxfp4));
}

}  // namespace
}  // namespace drift::testing
