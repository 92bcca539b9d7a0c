// linear and batched_linear against the CPU backend (OpenBLAS sgemm on the same bf16-exact inputs).
// Both accumulate in fp32, so the difference is summation order plus the rounding of a bf16 output:
// tolerance 5e-3 relative L2 (fp32 logits: 1e-4). Rows 1..4 take the GEMV kernel, more rows cuBLASLt;
// every small case runs through the streaming GEMV (the default), the GEMV of one row group a CTA under
// each split rule, and with the GEMVs switched off. linear_silu_mul (the stacked gate/up projection with
// the activation in the GEMV's epilogue) must equal linear then silu_mul exactly, and match the CPU.
#include <array>

#include "op_test_util.h"

namespace drift::testing {
namespace {

constexpr double kGemmBf16 = 5e-3;
constexpr double kGemmF32 = 1e-4;

struct LinearCase {
  int64_t m, n, k;
  bool bias, out_f32;
};

using LinearTest = CudaOpsTest;

TEST_F(LinearTest, LinearMatchesCpu) {
  auto no_gemv = backend::make_cuda_ops({.small_batch_gemv = false});
  ASSERT_TRUE(no_gemv.ok());
  // the row-group GEMV's other split rule
  auto by_bytes = backend::make_cuda_ops({.gemv_split_by_iterations = false, .gemv_stream = false});
  ASSERT_TRUE(by_bytes.ok());
  auto row_groups = backend::make_cuda_ops({.gemv_stream = false});  // the other GEMV: one row group a CTA
  ASSERT_TRUE(row_groups.ok());
  for (const LinearCase& c : {LinearCase{1, 3072, 2048, false, false}, LinearCase{2, 512, 2048, true, false},
                              LinearCase{3, 100, 64, false, false}, LinearCase{4, 1000, 14336, false, false},
                              LinearCase{1, 704, 64, false, true}, LinearCase{3, 704, 64, true, true},
                              LinearCase{5, 704, 96, true, true}, LinearCase{17, 512, 1024, true, false},
                              LinearCase{64, 256, 1024, false, false}, LinearCase{130, 384, 72, false, false},
                              LinearCase{7, 96, 24, true, false}, LinearCase{1, 128256 / 8, 2048, false, true},
                              LinearCase{2, 300, 20480, true, false}, LinearCase{1, 4104, 14336, false, false},
                              LinearCase{4, 2053, 4096, true, true}, LinearCase{1, 5120, 2880, true, false},
                              LinearCase{1, 32, 2880, true, true}, LinearCase{2, 2880, 4096, true, false}}) {
    const auto x = random_values(c.m * c.k), w = random_values(c.n * c.k, 0.05f), b = random_values(c.n);
    auto c_x = cpu_f32(x, {c.m, c.k});
    auto c_w = cpu_f32(w, {c.n, c.k});
    auto c_b = cpu_f32(b, {c.n});
    auto c_out = cpu_->alloc(DType::kF32, {c.m, c.n});
    cpu_->linear(c_x.view, c_w.view, c.bias ? c_b.view : Tensor(), c_out.view);
    const auto want = read_cpu(c_out.view);

    auto g_x = gpu_bf16(x, {c.m, c.k});
    auto g_w = gpu_bf16(w, {c.n, c.k});
    auto g_b = gpu_bf16(b, {c.n});
    const DType out_type = c.out_f32 ? DType::kF32 : DType::kBF16;
    const double tolerance = c.out_f32 ? kGemmF32 : kGemmBf16;
    for (backend::Ops* ops : {gpu_.get(), no_gemv->get(), by_bytes->get(), row_groups->get()}) {
      auto g_out = gpu_poisoned(out_type, {c.m, c.n});
      gpu_->synchronize();  // inputs and poison were queued on gpu_'s stream
      ops->linear(g_x.view, g_w.view, c.bias ? g_b.view : Tensor(), g_out.view);
      ops->synchronize();
      EXPECT_CLOSE(read_gpu(g_out.view), want, tolerance)
          << "m=" << c.m << " n=" << c.n << " k=" << c.k << " bias=" << c.bias << " f32=" << c.out_f32
          << (ops == gpu_.get()        ? " (streaming gemv)"
              : ops == no_gemv->get()  ? " (cuBLASLt)"
              : ops == by_bytes->get() ? " (row-group gemv split by bytes)"
                                       : " (row-group gemv)");
    }
  }
}

TEST_F(LinearTest, LinearSiluMulMatchesUnfused) {
  // The row-group GEMV under each split rule, fused and not, and the default (unfused, the streaming GEMV).
  auto fused = backend::make_cuda_ops({.fuse_swiglu_gemv = true});
  auto unfused = backend::make_cuda_ops({.fuse_swiglu_gemv = false, .gemv_stream = false});
  auto fused_by_bytes = backend::make_cuda_ops({.fuse_swiglu_gemv = true, .gemv_split_by_iterations = false});
  auto unfused_by_bytes = backend::make_cuda_ops(
      {.fuse_swiglu_gemv = false, .gemv_split_by_iterations = false, .gemv_stream = false});
  ASSERT_TRUE(fused.ok() && unfused.ok() && fused_by_bytes.ok() && unfused_by_bytes.ok());
  backend::Ops* const variants[] = {fused->get(), unfused->get(), fused_by_bytes->get(), unfused_by_bytes->get(),
                                    gpu_.get()};
  const char* const names[] = {"fused", "unfused", "fused, split by bytes", "unfused, split by bytes",
                               "unfused, streaming"};
  for (auto [m, ffn, k, bias] : {std::array<int64_t, 4>{1, 8192, 2048, 0}, {2, 1000, 64, 1}, {3, 513, 4096, 0},
                                 {4, 2048, 1024, 1}, {1, 7, 14336, 0}, {9, 256, 512, 1}}) {
    const auto x = random_values(m * k), w = random_values(2 * ffn * k, 0.05f), b = random_values(2 * ffn);
    auto c_x = cpu_f32(x, {m, k});
    auto c_w = cpu_f32(w, {2 * ffn, k});
    auto c_b = cpu_f32(b, {2 * ffn});
    auto c_gu = cpu_->alloc(DType::kF32, {m, 2 * ffn});
    auto c_act = cpu_->alloc(DType::kF32, {m, ffn});
    cpu_->linear_silu_mul(c_x.view, c_w.view, bias ? c_b.view : Tensor(), c_gu.view, c_act.view);
    const auto want = read_cpu(c_act.view);

    auto g_x = gpu_bf16(x, {m, k});
    auto g_w = gpu_bf16(w, {2 * ffn, k});
    auto g_b = gpu_bf16(b, {2 * ffn});
    std::vector<std::vector<float>> results;
    for (int v = 0; v < 5; ++v) {
      backend::Ops* ops = variants[v];
      auto gate_up = gpu_poisoned(DType::kBF16, {m, 2 * ffn});
      auto act = gpu_poisoned(DType::kBF16, {m, ffn});
      gpu_->synchronize();
      ops->linear_silu_mul(g_x.view, g_w.view, bias ? g_b.view : Tensor(), gate_up.view, act.view);
      ops->synchronize();
      results.push_back(read_gpu(act.view));
      EXPECT_CLOSE(results.back(), want, kGemmBf16)
          << "m=" << m << " ffn=" << ffn << " k=" << k
          << " " << names[v];
    }
    // The fused GEMV rounds gate and up to bf16 as the unfused pair does: the same bits under either rule.
    if (m <= 4) {
      EXPECT_EQ(results[0], results[1]) << "m=" << m << " ffn=" << ffn << " k=" << k;
      EXPECT_EQ(results[2], results[3]) << "m=" << m << " ffn=" << ffn << " k=" << k << " (split by bytes)";
    }
  }
}

TEST_F(LinearTest, BatchedLinearMatchesCpu) {
  // MLA's absorbed projections: W_UK^T [heads, kv_lora_rank, nope] and W_UV [heads, v, kv_lora_rank], at
  // DeepSeek's size (128 heads, 128 / 512) and the fixtures' (16 -> 32, 32 -> 12 and 16), and odd sizes.
  for (auto [t, b, k, n] : {std::array<int64_t, 4>{3, 4, 64, 32}, {1, 16, 128, 512}, {9, 2, 40, 24},
                            {5, 128, 128, 512}, {2, 128, 512, 128}, {7, 4, 16, 32}, {7, 4, 32, 12}, {1, 4, 32, 16},
                            {11, 3, 13, 9}}) {
    const auto x = random_values(t * b * k), w = random_values(b * n * k, 0.1f);
    auto c_x = cpu_f32(x, {t, b, k});
    auto c_w = cpu_f32(w, {b, n, k});
    auto c_out = cpu_->alloc(DType::kF32, {t, b, n});
    cpu_->batched_linear(c_x.view, c_w.view, c_out.view);
    auto g_x = gpu_bf16(x, {t, b, k});
    auto g_w = gpu_bf16(w, {b, n, k});
    auto g_out = gpu_poisoned(DType::kBF16, {t, b, n});
    gpu_->batched_linear(g_x.view, g_w.view, g_out.view);
    EXPECT_CLOSE(read_gpu(g_out.view), read_cpu(c_out.view), kGemmBf16) << t << "x" << b << "x" << k << "->" << n;
  }
}

}  // namespace
}  // namespace drift::testing
