// MLA's expanded prefill (ops.h: GatherContextParams, MlaPrefillParams) on CUDA against the CPU backend.
// gather_context: every sequence's cached rows packed in position order from scattered blocks (bf16: the
// same bits; FP8 codes: dequantized within bf16 rounding), with sequences of odd lengths, one ending at a
// block boundary, and unused table entries. mla_prefill_attention: DeepSeek's widths (nope 128, rope 64,
// v 128, 16 heads) and the fixtures' small ones, sequences whose new tokens follow a cached prefix and
// ones that are all new, a single new token, and tiles that end mid-way; outputs start as NaN, so an
// unwritten row fails. Tolerance 1e-2 relative L2 (bf16 inputs and outputs, fp32 softmax).
#include <algorithm>
#include <numeric>
#include <ostream>

#include "attention_case.h"
#include "op_test_util.h"

namespace drift::testing {
namespace {

constexpr double kAttention = 1e-2;

struct PrefillCase {
  std::string name;
  int64_t heads, nope, rope, v;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (context length, new tokens at its end)
};

void PrintTo(const PrefillCase& c, std::ostream* os) { *os << c.name; }

class MlaPrefillTest : public CudaOpsTest, public ::testing::WithParamInterface<PrefillCase> {};

TEST_P(MlaPrefillTest, MatchesCpu) {
  const PrefillCase& c = GetParam();
  std::vector<int32_t> query_start{0}, key_start{0};
  for (const auto& [context, fresh] : c.seqs) {
    query_start.push_back(query_start.back() + fresh);
    key_start.push_back(key_start.back() + context);
  }
  const int64_t tokens = query_start.back(), rows = key_start.back(), seqs = int64_t(c.seqs.size()), h = c.heads;
  const std::vector<float> q_nope = random_values(tokens * h * c.nope), q_rope = random_values(tokens * h * c.rope);
  const std::vector<float> kv = random_values(rows * h * (c.nope + c.v)), k_rope = random_values(rows * c.rope);
  const float scale = 1.0f / std::sqrt(float(c.nope + c.rope));
  auto run = [&](backend::Ops& ops, bool gpu) {
    auto floats = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto ints = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_i32(v, shape) : cpu_i32(v, shape);
    };
    backend::Buffer qn = floats(q_nope, {tokens, h, c.nope}), qr = floats(q_rope, {tokens, h, c.rope});
    backend::Buffer kvb = floats(kv, {rows, h, c.nope + c.v}), kr = floats(k_rope, {rows, c.rope});
    backend::Buffer qs = ints(query_start, {seqs + 1}), ks = ints(key_start, {seqs + 1});
    backend::Buffer out = gpu ? gpu_poisoned(DType::kBF16, {tokens, h, c.v}) : ops.alloc(DType::kF32, {tokens, h, c.v});
    ops.mla_prefill_attention({.q_nope = qn.view, .q_rope = qr.view, .kv = kvb.view, .k_rope = kr.view,
                               .query_start = qs.view, .key_start = ks.view, .out = out.view, .scale = scale});
    return gpu ? read_gpu(out.view) : read_cpu(out.view);
  };
  ASSERT_TRUE(gpu_->supports_mla_prefill(c.nope, c.rope, c.v));
  EXPECT_CLOSE(run(*gpu_, true), run(*cpu_, false), kAttention);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MlaPrefillTest,
    ::testing::Values(PrefillCase{"deepseek_one_prompt", 16, 128, 64, 128, {{300, 300}}},
                      PrefillCase{"deepseek_prefixes", 16, 128, 64, 128, {{1000, 77}, {65, 1}, {200, 130}, {64, 64}}},
                      PrefillCase{"fixture_v2", 4, 16, 8, 16, {{88, 88}, {40, 7}, {129, 64}}},
                      PrefillCase{"fixture_youtu", 4, 16, 16, 32, {{88, 24}, {3, 3}}},
                      PrefillCase{"mla_14m", 8, 32, 16, 32, {{512, 512}}}),
    [](const auto& param_info) { return param_info.param.name; });

class GatherContextTest : public CudaOpsTest, public ::testing::WithParamInterface<bool> {};

TEST_P(GatherContextTest, PacksEverySequencesRowsInOrder) {
  const bool fp8 = GetParam();
  constexpr int64_t kBlockSize = 16, kBlocks = 24, kWidth = 576, kSplit = 512, kMaxBlocks = 8;
  const std::vector<int32_t> lens{37, 64, 1, 100};
  std::vector<int32_t> order(kBlocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng_);
  std::vector<int32_t> tables(lens.size() * kMaxBlocks, -1);
  size_t next = 0;
  for (size_t s = 0; s < lens.size(); ++s)
    for (int64_t b = 0; b < (lens[s] + kBlockSize - 1) / kBlockSize; ++b) tables[s * kMaxBlocks + size_t(b)] = order[next++];
  const std::vector<float> cache = random_values(kBlocks * kBlockSize * kWidth);
  const Fp8Cache codes = quantize_fp8_cache(cache, kWidth);
  const int64_t rows = 256, seqs = int64_t(lens.size());
  auto run = [&](backend::Ops& ops, bool gpu) {
    backend::Buffer k_cache, k_scale;
    if (fp8) {
      k_cache = ops.alloc(DType::kF8E4M3, {kBlocks, kBlockSize, 1, kWidth});
      ops.copy_from_host(k_cache.view, codes.codes.data());
      k_scale = gpu ? gpu_f32(codes.scales, {kBlocks, kBlockSize, 1}) : cpu_f32(codes.scales, {kBlocks, kBlockSize, 1});
    } else {
      k_cache = gpu ? gpu_bf16(cache, {kBlocks, kBlockSize, 1, kWidth}) : cpu_f32(cache, {kBlocks, kBlockSize, 1, kWidth});
    }
    backend::Buffer table = gpu ? gpu_i32(tables, {seqs, kMaxBlocks}) : cpu_i32(tables, {seqs, kMaxBlocks});
    backend::Buffer context_lens = gpu ? gpu_i32(lens, {seqs}) : cpu_i32(lens, {seqs});
    const DType t = gpu ? DType::kBF16 : DType::kF32;
    backend::Buffer head = ops.alloc(t, {rows, kSplit}), tail = ops.alloc(t, {rows, kWidth - kSplit});
    backend::Buffer key_start = ops.alloc(DType::kI32, {seqs + 1});
    ops.gather_context({.k_cache = k_cache.view, .k_scale = k_scale.view, .block_tables = table.view,
                        .context_lens = context_lens.view, .head = head.view, .tail = tail.view,
                        .key_start = key_start.view});
    std::vector<int32_t> starts(size_t(seqs + 1));
    ops.copy_to_host(starts.data(), key_start.view);
    const int64_t used = std::accumulate(lens.begin(), lens.end(), int64_t{0});
    auto read = [&](const Tensor& x) { return gpu ? read_gpu(x.slice(0, used)) : read_cpu(x.slice(0, used)); };
    return std::tuple{starts, read(head.view), read(tail.view)};
  };
  const auto [gpu_starts, gpu_head, gpu_tail] = run(*gpu_, true);
  const auto [cpu_starts, cpu_head, cpu_tail] = run(*cpu_, false);
  EXPECT_EQ(gpu_starts, (std::vector<int32_t>{0, 37, 101, 102, 202}));
  EXPECT_EQ(gpu_starts, cpu_starts);
  // bf16 rows are copied; FP8 ones are code * scale rounded to bf16 once.
  const double tolerance = fp8 ? 4e-3 : 0.0;
  EXPECT_CLOSE(gpu_head, cpu_head, tolerance);
  EXPECT_CLOSE(gpu_tail, cpu_tail, tolerance);
}

INSTANTIATE_TEST_SUITE_P(Caches, GatherContextTest, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? std::string("fp8") : std::string("bf16"); });

}  // namespace
}  // namespace drift::testing
