// The CUDA mixture-of-experts ops against the CPU oracle: routing in GPT-OSS's and DeepSeek's variants
// (ids exactly, weights to fp32 rounding), and MXFP4 experts (the CPU gets the same codes decoded to fp32)
// and bf16 experts (DeepSeek) at batch 1, odd token counts, experts that get no token, every token on one
// expert, and prefill sizes; and matrices of a range of the experts (expert parallelism's first_expert),
// where the other experts' choices add nothing and a token with none of them gets a zero row.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

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
  // Expert id of matrix 0: the matrices hold [first_expert, first_expert + experts) and choices outside
  // are another rank's (used_experts may then exceed experts).
  int32_t first_expert = 0;
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

// One experts case's host inputs (fp32, bf16-exact): x, routing, biases (used where `bias`), expert matrices.
struct ExpertsInputs {
  std::vector<float> x, weights, b_gate_up, b_down, gate_up, down;
  std::vector<int32_t> ids;
  bool bias = true;
  std::vector<float> add;  // added into the output (DeepSeek's shared experts' rows); empty: none
};

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
  // x, routing and biases; the expert matrices are the caller's.
  ExpertsInputs random_inputs(const ExpertsCase& c);
  std::vector<float> cpu_experts(const ExpertsCase& c, const ExpertsInputs& in);
  // moe_experts on the GPU with p's expert matrices (bf16, or MXFP4 codes and scales), run twice: the
  // second must give the same bits.
  std::vector<float> gpu_experts(const ExpertsCase& c, const ExpertsInputs& in, const backend::MoeShape& shape,
                                 backend::MoeExpertsParams p);
  void expect_experts_match(const ExpertsCase& c);
  void expect_bf16_experts_match(const ExpertsCase& c);
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
      {"deepseek-v2 greedy softmax, not renormalised, scaled", 33, 160, 6, rule(Scoring::kSoftmax, 1, 1, 1, false, 16.0f),
       false},
      {"deepseek-v2 greedy at batch 1", 1, 64, 6, rule(Scoring::kSoftmax, 1, 1, 1, false, 1.0f), false},
      {"deepseek-v3 fixture: 8 experts, 2 groups, keep 1, top-3", 31, 8, 3, rule(Scoring::kSigmoid, 2, 1, 2, true, 2.5f),
       true},
      {"deepseek-v3 at batch 1", 1, 256, 8, rule(Scoring::kSigmoid, 8, 4, 2, true, 2.5f), true},
      {"sigmoid, no bias, not renormalised", 9, 72, 4, rule(Scoring::kSigmoid, 1, 1, 1, false, 1.0f), false},
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
      {"64 tokens (16-token staged tiles)", 64, 128, 128, 32, 4, 32, true, 7.0f},
      {"300 tokens (prefill tiles)", 300, 256, 192, 8, 4, 8, true, 7.0f},
      {"prefill, 2 of 8 experts", 101, 128, 128, 8, 2, 2, false, 7.0f},
      {"experts 4..7 of 8 held (rank 1 of 2)", 17, 128, 64, 4, 4, 8, true, 7.0f, 4},
      {"batch 1, experts 2..3 of 8 held (rank 1 of 4)", 1, 128, 64, 2, 2, 8, true, 7.0f, 2},
      {"prefill, experts 0..3 of 8 held", 300, 128, 64, 4, 4, 8, true, 7.0f, 0},
      {"batch 1, GPT-OSS's hidden 2880 (a half step of 16-byte lanes), ffn 192", 1, 2880, 192, 8, 4, 8, true, 7.0f},
      {"5 tokens, hidden 2880, ffn 192", 5, 2880, 192, 8, 4, 8, true, 7.0f},
      {"batch 1, gate rows first, hidden 2880, ffn 320", 1, 2880, 320, 8, 4, 8, false, 7.0f},
      {"prefill at hidden 2880, ffn 192 (full and part-full tiles)", 200, 2880, 192, 8, 4, 8, true, 7.0f},
  };
  // Every case with one token read directly (a CTA per item, and streamed: CudaOptions::moe_one_token_stream)
  // and grouped as larger batches are, and with prefill tiles on mma.sync, on wgmma (CudaOptions::moe_wgmma)
  // and on wgmma 128 pairs wide (CudaOptions::moe_wgmma_wide).
  auto* cuda = dynamic_cast<backend::CudaOps*>(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  struct Choice {
    bool one_token, stream, wgmma, wide;
  };
  for (const Choice& k : {Choice{true, false, false, false}, Choice{true, true, false, false},
                          Choice{false, false, false, false}, Choice{true, false, true, false},
                          Choice{true, false, true, true}}) {
    cuda->set_moe_one_token_kernels(k.one_token);
    cuda->set_moe_one_token_stream(k.stream);
    cuda->set_moe_wgmma(k.wgmma);
    cuda->set_moe_wgmma_wide(k.wide);
    for (const ExpertsCase& c : cases) {
      SCOPED_TRACE(fmt::format("{} (one-token kernels {}, streamed {}, wgmma {}, wide {})", c.name, k.one_token,
                               k.stream, k.wgmma, k.wide));
      expect_experts_match(c);
      if (HasFailure()) break;
    }
  }
  cuda->set_moe_one_token_kernels(true);
  cuda->set_moe_one_token_stream(backend::CudaOptions{}.moe_one_token_stream);
  cuda->set_moe_wgmma(backend::CudaOptions{}.moe_wgmma);
  cuda->set_moe_wgmma_wide(backend::CudaOptions{}.moe_wgmma_wide);
}

// bf16 experts (DeepSeek): the CPU runs the same bf16-exact weights in fp32.
TEST_F(CudaMoeTest, Bf16ExpertsMatchTheCpu) {
  const ExpertsCase cases[] = {
      {"batch 1", 1, 64, 32, 8, 2, 8, false, 0.0f},
      {"batch 1, deepseek-v3 top-8 of 64", 1, 256, 96, 64, 8, 64, false, 0.0f},
      {"3 tokens, odd widths (hidden 72, ffn 40)", 3, 72, 40, 8, 3, 8, false, 0.0f},
      {"17 tokens, 4 of 16 experts used (the rest get no token)", 17, 192, 128, 16, 4, 4, false, 0.0f},
      {"every token on one expert", 29, 64, 64, 8, 1, 1, false, 0.0f},
      {"interleaved gate/up rows, clamped SwiGLU", 21, 128, 64, 8, 2, 8, true, 7.0f},
      {"300 tokens (prefill: many tiles per expert)", 300, 256, 192, 8, 4, 8, false, 0.0f},
      {"k past a whole step (hidden 200, ffn 136)", 40, 200, 136, 6, 2, 6, false, 0.0f},
      {"16 tokens, deepseek-v2 top-6 of 64", 16, 128, 192, 64, 6, 64, false, 0.0f},
      {"batch 1, 2 of 8 experts", 1, 128, 64, 8, 2, 8, false, 0.0f},
      {"experts 4..7 of 8 held (rank 1 of 2)", 17, 128, 64, 4, 2, 8, false, 0.0f, 4},
      {"batch 1, experts 6..7 of 8 held (rank 3 of 4)", 1, 64, 32, 2, 2, 8, false, 0.0f, 6},
      {"prefill, experts 32..63 of 64 held", 300, 128, 64, 32, 6, 64, false, 0.0f, 32},
  };
  // Widths that are multiples of 64 take the tensor-core kernels (with and without the one-token ones);
  // every case also runs on CUDA cores.
  auto* cuda = dynamic_cast<backend::CudaOps*>(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  struct Choice {
    bool tensor_cores, one_token, stream, wgmma, wide;
    const char* label;
  };
  for (const Choice& k : {Choice{true, true, false, false, false, "tensor cores where the widths allow"},
                          Choice{true, true, true, false, false, "tensor cores, one token streamed"},
                          Choice{true, false, false, false, false, "tensor cores, one token grouped"},
                          Choice{true, true, false, true, false, "tensor cores, prefill tiles on wgmma"},
                          Choice{true, true, false, true, true, "tensor cores, 128-pair prefill tiles on wgmma"},
                          Choice{false, true, false, false, false, "CUDA cores"}}) {
    cuda->set_moe_tensor_cores(k.tensor_cores);
    cuda->set_moe_one_token_kernels(k.one_token);
    cuda->set_moe_one_token_stream(k.stream);
    cuda->set_moe_wgmma(k.wgmma);
    cuda->set_moe_wgmma_wide(k.wide);
    for (const ExpertsCase& c : cases) {
      SCOPED_TRACE(fmt::format("{} ({})", c.name, k.label));
      expect_bf16_experts_match(c);
      if (HasFailure()) break;
    }
  }
  cuda->set_moe_tensor_cores(true);
  cuda->set_moe_one_token_kernels(true);
  cuda->set_moe_one_token_stream(backend::CudaOptions{}.moe_one_token_stream);
  cuda->set_moe_wgmma(backend::CudaOptions{}.moe_wgmma);
  cuda->set_moe_wgmma_wide(backend::CudaOptions{}.moe_wgmma_wide);
}

ExpertsInputs CudaMoeTest::random_inputs(const ExpertsCase& c) {
  ExpertsInputs in;
  in.x = random_values(c.tokens * c.hidden);
  in.b_gate_up = random_values(c.experts * 2 * c.ffn, 0.1f);
  in.b_down = random_values(c.experts * c.hidden, 0.1f);
  draw_choices(rng_, c, in.ids, in.weights);
  return in;
}

std::vector<float> CudaMoeTest::cpu_experts(const ExpertsCase& c, const ExpertsInputs& in) {
  const int64_t e = c.experts, h = c.hidden, f = c.ffn, n = c.tokens;
  backend::Buffer x = cpu_f32(in.x, {n, h}), ids = cpu_i32(in.ids, {n, c.top_k}), w = cpu_f32(in.weights, {n, c.top_k});
  backend::Buffer gu = cpu_f32(in.gate_up, {e, 2 * f, h}), dn = cpu_f32(in.down, {e, h, f});
  backend::Buffer b_gu = cpu_f32(in.b_gate_up, {e, 2 * f}), b_dn = cpu_f32(in.b_down, {e, h});
  backend::Buffer out = cpu_->alloc(DType::kF32, {n, h});
  backend::MoeExpertsParams p;
  p.gate_up_interleaved = c.interleaved;
  p.swiglu_limit = c.swiglu_limit;
  p.first_expert = c.first_expert;
  p.x = x.view, p.topk_ids = ids.view, p.topk_weights = w.view, p.w_gate_up = gu.view, p.w_down = dn.view;
  if (in.bias) p.b_gate_up = b_gu.view, p.b_down = b_dn.view;
  p.out = out.view;
  backend::Buffer add;
  if (!in.add.empty()) add = cpu_f32(in.add, {n, h}), p.add = add.view;
  cpu_->moe_experts(p);
  return read_cpu(out.view);
}

std::vector<float> CudaMoeTest::gpu_experts(const ExpertsCase& c, const ExpertsInputs& in, const backend::MoeShape& shape,
                                            backend::MoeExpertsParams p) {
  const int64_t e = c.experts, h = c.hidden, f = c.ffn, n = c.tokens;
  EXPECT_TRUE(gpu_->supports(shape).ok()) << gpu_->supports(shape).to_string();
  backend::Buffer x = gpu_bf16(in.x, {n, h}), ids = gpu_i32(in.ids, {n, c.top_k}), w = gpu_f32(in.weights, {n, c.top_k});
  backend::Buffer b_gu = gpu_bf16(in.b_gate_up, {e, 2 * f}), b_dn = gpu_bf16(in.b_down, {e, h});
  backend::Buffer out = gpu_poisoned(DType::kBF16, {n, h});
  backend::Buffer work = gpu_->alloc(DType::kU8, {int64_t(gpu_->moe_workspace_bytes(shape, n))});
  p.gate_up_interleaved = c.interleaved;
  p.swiglu_limit = c.swiglu_limit;
  p.first_expert = c.first_expert;
  p.x = x.view, p.topk_ids = ids.view, p.topk_weights = w.view, p.out = out.view, p.workspace = work.view;
  if (in.bias) p.b_gate_up = b_gu.view, p.b_down = b_dn.view;
  backend::Buffer add;
  if (!in.add.empty()) add = gpu_bf16(in.add, {n, h}), p.add = add.view;
  gpu_->moe_experts(p);
  const std::vector<float> got = read_gpu(out.view);
  gpu_->moe_experts(p);
  EXPECT_EQ(read_gpu(out.view), got) << "the same launch twice gives other bits";
  return got;
}

void CudaMoeTest::expect_experts_match(const ExpertsCase& c) {
  const int64_t e = c.experts, h = c.hidden, f = c.ffn;
  const std::vector<uint8_t> gu_codes = random_bytes(e * 2 * f * h / 2, 0, 256);
  const std::vector<uint8_t> gu_scales = random_bytes(e * 2 * f * h / 32, 119, 125);
  const std::vector<uint8_t> dn_codes = random_bytes(e * h * f / 2, 0, 256);
  const std::vector<uint8_t> dn_scales = random_bytes(e * h * f / 32, 119, 125);
  ExpertsInputs in = random_inputs(c);
  in.gate_up.resize(size_t(e * 2 * f * h));
  in.down.resize(size_t(e * h * f));
  weights::dequantize_mxfp4(gu_codes, gu_scales, in.gate_up);
  weights::dequantize_mxfp4(dn_codes, dn_scales, in.down);
  const std::vector<float> want = cpu_experts(c, in);

  const backend::MoeShape shape{.hidden = h, .ffn = f, .num_experts = e, .top_k = c.top_k, .mxfp4 = true};
  backend::Buffer gu = gpu_u8(gu_codes, {e, 2 * f, h / 2}), gus = gpu_u8(gu_scales, {e, 2 * f, h / 32});
  backend::Buffer dn = gpu_u8(dn_codes, {e, h, f / 2}), dns = gpu_u8(dn_scales, {e, h, f / 32});
  backend::MoeExpertsParams p;
  p.w_gate_up = gu.view, p.w_gate_up_scales = gus.view, p.w_down = dn.view, p.w_down_scales = dns.view;
  // bf16 inputs to each product (x, the activation) and a bf16 output: a few bf16 roundings deep.
  EXPECT_CLOSE(gpu_experts(c, in, shape, p), want, 1.5e-2);
}

void CudaMoeTest::expect_bf16_experts_match(const ExpertsCase& c) {
  const int64_t e = c.experts, h = c.hidden, f = c.ffn;
  ExpertsInputs in = random_inputs(c);
  in.gate_up = random_values(e * 2 * f * h, 0.1f);
  in.down = random_values(e * h * f, 0.1f);
  in.bias = c.interleaved;  // GPT-OSS-like rows carry biases; DeepSeek's have none
  if (!c.interleaved) in.add = random_values(c.tokens * c.hidden);  // and the shared experts' rows join the sum
  const std::vector<float> want = cpu_experts(c, in);

  const backend::MoeShape shape{.hidden = h, .ffn = f, .num_experts = e, .top_k = c.top_k,
                                .clamped_swiglu = c.swiglu_limit > 0.0f};
  backend::Buffer gu = gpu_bf16(in.gate_up, {e, 2 * f, h}), dn = gpu_bf16(in.down, {e, h, f});
  backend::MoeExpertsParams p;
  p.w_gate_up = gu.view, p.w_down = dn.view;
  EXPECT_CLOSE(gpu_experts(c, in, shape, p), want, 1.5e-2);
}

TEST_F(CudaMoeTest, RefusesExpertsItCannotRun) {
  EXPECT_TRUE(gpu_->supports(backend::MoeShape{.hidden = 64, .ffn = 64, .num_experts = 8, .top_k = 2}).ok());
  EXPECT_FALSE(gpu_->supports(backend::MoeShape{.hidden = 64, .ffn = 1407, .num_experts = 8, .top_k = 2}).ok());
  EXPECT_FALSE(
      gpu_->supports(backend::MoeShape{.hidden = 96, .ffn = 64, .num_experts = 8, .top_k = 2, .mxfp4 = true}).ok());
  EXPECT_TRUE(gpu_->reads_weight_format(backend::WeightFormat::kMxfp4));
}

}  // namespace
}  // namespace drift::testing
