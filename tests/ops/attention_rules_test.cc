// CUDA paged attention with the new key rules against the CPU backend and the brute-force reference
// (tests/support/attention_case.h): explicit query positions, draft trees through packed ancestor masks
// beside chains, windows and sinks, block-table views for decode (split-KV kernel) and for chains and
// trees (the split-KV kernel as verify steps take it, and the tensor-core kernel). Slots no query may read hold NaN, and the output starts as NaN.
// Tolerance 1e-2 relative L2, as for the chain cases (bf16 output and bf16 softmax weights in P V).
#include <algorithm>
#include <ostream>

#include "attention_case.h"
#include "op_test_util.h"

namespace drift::testing {

void PrintTo(const KeyCase& c, std::ostream* os) { *os << c.name; }

namespace {

constexpr double kAttention = 1e-2;

class AttentionRulesTest : public CudaOpsTest, public ::testing::WithParamInterface<KeyCase> {
 protected:
  // The op on `ops` (bf16 q and caches on the GPU, fp32 on the CPU).
  std::vector<float> run(backend::Ops& ops, bool gpu, const KeyCase& c, const KeyInputs& in) {
    const int64_t t = in.num_tokens, h = c.num_heads, d = c.head_dim;
    auto floats = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto ints = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_i32(v, shape) : cpu_i32(v, shape);
    };
    KeyBuffers b = upload_key_inputs(c, in, floats, ints);
    b.sinks = gpu ? gpu_f32(in.sinks, {h}) : cpu_f32(in.sinks, {h});
    b.out = gpu ? gpu_poisoned(DType::kBF16, {t, h, d}) : ops.alloc(DType::kF32, {t, h, d});
    const backend::PagedAttentionParams p = b.params(c, in);
    if (gpu) gpu_->synchronize();  // `ops` may be another CUDA backend, on its own stream
    ops.paged_attention(p);
    ops.synchronize();
    return gpu ? read_gpu(b.out.view) : read_cpu(b.out.view);
  }
};

TEST_P(AttentionRulesTest, MatchesCpuAndTheDefinition) {
  const KeyCase& c = GetParam();
  const KeyInputs in = build_inputs(c, rng_);
  const auto got = run(*gpu_, true, c, in);
  EXPECT_CLOSE(got, run(*cpu_, false, c, in), kAttention) << c.name;
  EXPECT_CLOSE(got, reference_attention(c, in), kAttention) << c.name;
  EXPECT_EQ(run(*gpu_, true, c, in), got) << c.name << ": the same launch twice gives other bits";
}

// The default backend sends these short steps (a few tokens a sequence, as verify steps have) to the
// split-KV decode kernel (CudaOptions::split_kv_max_tokens_per_seq); the same steps through the tensor-core
// prefill kernel, as longer ones take it.
TEST_P(AttentionRulesTest, TensorCoreRouteMatchesCpu) {
  const KeyCase& c = GetParam();
  auto split = backend::make_cuda_ops({.split_kv_max_tokens_per_seq = 0});
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  const KeyInputs in = build_inputs(c, rng_);
  const auto got = run(**split, true, c, in);
  EXPECT_CLOSE(got, run(*cpu_, false, c, in), kAttention) << c.name;
  EXPECT_CLOSE(got, reference_attention(c, in), kAttention) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionRulesTest, ::testing::ValuesIn(key_cases()),
                         [](const ::testing::TestParamInfo<KeyCase>& test) { return test.param.name; });

}  // namespace
}  // namespace drift::testing
