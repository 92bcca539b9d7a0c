// CUDA paged attention with the new key rules against the CPU backend and the brute-force reference
// (tests/support/attention_case.h): explicit query positions, draft trees through packed ancestor masks
// beside chains, windows and sinks, block-table views for decode (split-KV kernel) and for chains and
// trees (tensor-core kernel). Slots no query may read hold NaN, and the output starts as NaN.
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
    const int64_t t = in.num_tokens, h = c.num_heads, d = c.head_dim, hk = c.num_kv_heads;
    auto floats = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto ints = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_i32(v, shape) : cpu_i32(v, shape);
    };
    auto q = floats(in.q, {t, h, d});
    auto k = floats(in.k_cache, {in.num_blocks, c.block_size, hk, d});
    auto v = floats(in.v_cache, {in.num_blocks, c.block_size, hk, d});
    auto tables = ints(in.block_tables, {in.num_seqs, in.width});
    auto starts = ints(in.query_start, {in.num_seqs + 1});
    auto lens = ints(in.context_lens, {in.num_seqs});
    auto positions = ints(in.q_positions, {t});
    backend::Buffer mask, block_positions, view_blocks;
    if (in.mask_words > 0) {
      std::vector<int32_t> bits(in.tree_mask.begin(), in.tree_mask.end());
      mask = ints(bits, {t, in.mask_words});
      mask.view.dtype = DType::kU32;
    }
    if (!in.view_blocks.empty()) {
      block_positions = ints(in.block_positions, {in.num_seqs, in.width});
      view_blocks = ints(in.view_blocks, {in.num_seqs});
    }
    auto sinks = gpu ? gpu_f32(in.sinks, {h}) : cpu_f32(in.sinks, {h});
    auto out = gpu ? gpu_poisoned(DType::kBF16, {t, h, d}) : ops.alloc(DType::kF32, {t, h, d});
    backend::PagedAttentionParams p;
    p.q = q.view;
    p.k_cache = k.view;
    p.v_cache = v.view;
    p.out = out.view;
    p.block_tables = tables.view;
    p.query_start = starts.view;
    p.context_lens = lens.view;
    if (c.explicit_positions || in.mask_words > 0) p.q_positions = positions.view;
    p.tree_mask = mask.view;
    p.block_positions = block_positions.view;
    p.view_blocks = view_blocks.view;
    if (c.sinks) p.sinks = sinks.view;
    p.scale = in.scale;
    p.sliding_window = c.sliding_window;
    ops.paged_attention(p);
    return gpu ? read_gpu(out.view) : read_cpu(out.view);
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

INSTANTIATE_TEST_SUITE_P(Cases, AttentionRulesTest, ::testing::ValuesIn(key_cases()),
                         [](const ::testing::TestParamInfo<KeyCase>& test) { return test.param.name; });

}  // namespace
}  // namespace drift::testing
