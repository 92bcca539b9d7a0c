// paged_attention against the CPU backend: decode batches (one new token per sequence, split-KV path),
// prefill and chunked prefill (tensor-core path), variable lengths in one launch, GQA group sizes 1 to 16,
// head dims 16 to 128, block sizes 16 and 32, scattered block tables, sliding windows and sinks.
// Cache slots that no sequence may read hold NaN, and so does the output before the call: reading a
// wrong slot or leaving a row unwritten fails the test; so do the columns beside q when q is read in place
// from fused q/k/v rows. Tolerance 1e-2 relative L2: the output is
// rounded to bf16 and the prefill kernel rounds the softmax weights to bf16 for the P V product.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <string>

#include "backend/cuda/ops/launch.h"
#include "op_test_util.h"

namespace drift::testing {
namespace {

constexpr double kAttention = 1e-2;

struct SeqSpec {
  int32_t context_len, num_new;
};

struct AttentionCase {
  std::string name;
  int64_t head_dim, num_heads, num_kv_heads, block_size;
  std::vector<SeqSpec> seqs;
  int32_t sliding_window = 0;
  bool sinks = false;
  int64_t table_width = 0;  // 0: the widest sequence's blocks + 2
  float q_scale = 1.0f;     // larger: a sharper softmax
  int64_t q_pad = 0;        // > 0: q rows sit in wider rows (a fused q/k/v projection) with this many NaN after them
};

// What gtest prints for a case (the test listing and CTest names), instead of the object's bytes.
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

class AttentionTest : public CudaOpsTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionTest, MatchesCpu) {
  const AttentionCase& c = GetParam();
  const int64_t num_seqs = int64_t(c.seqs.size());
  int64_t num_tokens = 0, blocks_used = 0, widest = 0;
  for (const SeqSpec& s : c.seqs) {
    num_tokens += s.num_new;
    const int64_t blocks = (s.context_len + c.block_size - 1) / c.block_size;
    blocks_used += blocks;
    widest = std::max(widest, blocks);
  }
  const int64_t spare = 7, num_blocks = blocks_used + spare;
  const int64_t width = c.table_width > 0 ? c.table_width : widest + 2;

  // Scattered blocks; table entries past a sequence's context point at a spare (NaN) block.
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng_);
  const int32_t nan_block = pool.back();
  std::vector<int32_t> tables(size_t(num_seqs * width), nan_block), query_start{0}, context_lens;
  size_t next = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t blocks = (c.seqs[size_t(s)].context_len + c.block_size - 1) / c.block_size;
    for (int64_t b = 0; b < blocks; ++b) tables[size_t(s * width + b)] = pool[next++];
    if (c.sliding_window > 0) {  // blocks wholly before every new token's window are released (-1)
      const SeqSpec& seq = c.seqs[size_t(s)];
      const int32_t first_visible = std::max(0, seq.context_len - seq.num_new - c.sliding_window + 1);
      for (int64_t b = 0; (b + 1) * c.block_size <= first_visible; ++b) tables[size_t(s * width + b)] = -1;
    }
    query_start.push_back(query_start.back() + c.seqs[size_t(s)].num_new);
    context_lens.push_back(c.seqs[size_t(s)].context_len);
  }

  const int64_t row = c.num_kv_heads * c.head_dim;
  auto k_cache = random_values(num_blocks * c.block_size * row);
  auto v_cache = random_values(num_blocks * c.block_size * row);
  std::vector<bool> readable(size_t(num_blocks * c.block_size), false);
  for (int64_t s = 0; s < num_seqs; ++s)
    for (int32_t pos = 0; pos < c.seqs[size_t(s)].context_len; ++pos) {
      const int32_t block = tables[size_t(s * width + pos / c.block_size)];
      if (block >= 0) readable[size_t(block * c.block_size + pos % c.block_size)] = true;
    }
  for (size_t slot = 0; slot < readable.size(); ++slot)
    if (!readable[slot])
      for (int64_t i = 0; i < row; ++i) k_cache[slot * size_t(row) + size_t(i)] = v_cache[slot * size_t(row) + size_t(i)] = NAN;

  const auto q = random_values(num_tokens * c.num_heads * c.head_dim, c.q_scale);
  const auto sinks = random_values(c.num_heads, 2.0f);
  const float scale = float(1.0 / std::sqrt(double(c.head_dim)));

  auto run = [&](backend::Ops& ops, bool gpu) {
    auto up = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto up_i = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_i32(v, shape) : cpu_i32(v, shape);
    };
    // With q_pad, each token's q is the front of a wider row whose remaining columns hold NaN.
    const int64_t q_row = c.num_heads * c.head_dim, q_stride = q_row + c.q_pad;
    std::vector<float> q_rows(size_t(num_tokens * q_stride), NAN);
    for (int64_t t = 0; t < num_tokens; ++t)
      std::copy_n(q.begin() + t * q_row, q_row, q_rows.begin() + t * q_stride);
    auto q_buf = up(q_rows, {num_tokens, q_stride});
    auto k_buf = up(k_cache, {num_blocks, c.block_size, c.num_kv_heads, c.head_dim});
    auto v_buf = up(v_cache, {num_blocks, c.block_size, c.num_kv_heads, c.head_dim});
    auto tables_buf = up_i(tables, {num_seqs, width});
    auto qs_buf = up_i(query_start, {num_seqs + 1});
    auto cl_buf = up_i(context_lens, {num_seqs});
    auto sinks_buf = gpu ? gpu_f32(sinks, {c.num_heads}) : cpu_f32(sinks, {c.num_heads});
    auto out = gpu ? gpu_poisoned(DType::kBF16, {num_tokens, c.num_heads, c.head_dim})
                   : ops.alloc(DType::kF32, {num_tokens, c.num_heads, c.head_dim});
    backend::PagedAttentionParams p;
    p.q = Tensor(q_buf.view.data, q_buf.view.dtype, {num_tokens, c.num_heads, c.head_dim}, q_buf.view.device);
    p.q_row_stride = c.q_pad > 0 ? q_stride : 0;
    p.k_cache = k_buf.view;
    p.v_cache = v_buf.view;
    p.out = out.view;
    p.block_tables = tables_buf.view;
    p.query_start = qs_buf.view;
    p.context_lens = cl_buf.view;
    if (c.sinks) p.sinks = sinks_buf.view;
    p.scale = scale;
    p.sliding_window = c.sliding_window;
    if (gpu) gpu_->synchronize();  // `ops` may be another CUDA backend, on its own stream
    ops.paged_attention(p);
    ops.synchronize();
    return gpu ? read_gpu(out.view) : read_cpu(out.view);
  };
  const auto want = run(*cpu_, false);
  const auto got = run(*gpu_, true);
  EXPECT_CLOSE(got, want, kAttention) << c.name;
  // The same launch twice gives the same bits (no races between blocks).
  EXPECT_EQ(run(*gpu_, true), got) << c.name;
  // Decode steps of few (token, kv head) pairs with each group's heads over several CTAs.
  auto sliced = backend::make_cuda_ops({.decode_head_slices = true});
  ASSERT_TRUE(sliced.ok());
  EXPECT_CLOSE(run(*sliced->get(), true), want, kAttention) << c.name << " (head slices)";
}

// The split rule's choices, host side (the decode kernels rank counts for each sequence's own keys alike).
TEST(DecodeSplitRule, WholeWavesAndTheKeysAtHand) {
  // Llama-3.1-8B at 64 sequences of 576 keys, 512 (token, kv head) pairs on 396 slots: one split runs two
  // waves, the second a third full; three run four full waves of a third of the keys.
  EXPECT_EQ(backend::cuda::cheapest_decode_splits(512, 396, 576, 18), 3);
  // Llama-3.2-1B's 512 pairs on 660 slots fit one wave: one split for 576 keys, though a graph's table
  // 1024 keys wide ranks five first (four waves of a fifth of the keys).
  EXPECT_EQ(backend::cuda::cheapest_decode_splits(512, 660, 576, 18), 1);
  EXPECT_EQ(backend::cuda::cheapest_decode_splits(512, 660, 1024, 32), 5);
  // Batch 1 over a long context: as many splits as allowed.
  EXPECT_EQ(backend::cuda::cheapest_decode_splits(8, 660, 32768, 64), 64);
}

std::vector<SeqSpec> decode_batch(int n, int32_t max_context, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> len(1, max_context);
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < n; ++i) seqs.push_back({len(rng), 1});
  return seqs;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionTest,
    ::testing::Values(
        // Decode: one new token per sequence (split-KV kernel).
        AttentionCase{"decode_b1_d64", 64, 32, 8, 16, {{513, 1}}},
        AttentionCase{"decode_b1_wide_table", 128, 32, 8, 16, {{640, 1}}, 0, false, 256},
        AttentionCase{"decode_b5_d128", 128, 32, 8, 16, {{1, 1}, {17, 1}, {300, 1}, {1000, 1}, {4000, 1}}},
        AttentionCase{"decode_b64_d128", 128, 32, 8, 16, decode_batch(64, 700, 1)},
        AttentionCase{"decode_b16_d64_bs32", 64, 32, 8, 32, decode_batch(16, 900, 2)},
        AttentionCase{"decode_mha_d32", 32, 4, 4, 32, {{77, 1}, {5, 1}}},
        AttentionCase{"decode_group3_d16", 16, 6, 2, 16, {{40, 1}, {3, 1}}},
        AttentionCase{"decode_group4_d24", 24, 4, 1, 16, {{100, 1}}},
        AttentionCase{"decode_group8_d128", 128, 64, 8, 16, {{333, 1}, {64, 1}}},
        AttentionCase{"decode_group16_d64", 64, 32, 2, 16, {{100, 1}, {5, 1}}},
        AttentionCase{"decode_sharp", 128, 32, 8, 16, {{800, 1}, {31, 1}}, 0, false, 0, 6.0f},
        // Prefill, chunked prefill and mixed steps (tensor-core kernel).
        AttentionCase{"prefill_37_d64", 64, 32, 8, 16, {{37, 37}}},
        AttentionCase{"prefill_600_d128", 128, 32, 8, 16, {{600, 600}}},
        AttentionCase{"prefill_1_d128", 128, 32, 8, 16, {{1, 1}, {1, 1}, {2, 2}}},
        AttentionCase{"chunked_prefill_d128", 128, 32, 8, 16, {{300, 37}}},
        AttentionCase{"varlen_d64", 64, 16, 4, 16, {{1, 1}, {50, 50}, {130, 64}, {7, 3}, {200, 200}}},
        AttentionCase{"mixed_decode_and_prefill", 128, 32, 8, 16, {{500, 1}, {90, 90}, {70, 1}, {260, 4}}},
        AttentionCase{"prefill_group3_d16", 16, 6, 2, 16, {{28, 28}, {88, 88}, {4, 4}}},
        AttentionCase{"prefill_group4_d24", 24, 4, 1, 16, {{88, 88}}},
        AttentionCase{"prefill_mha_d32_bs32", 32, 4, 4, 32, {{100, 100}}},
        AttentionCase{"prefill_group16_d64", 64, 32, 2, 16, {{45, 45}}},
        AttentionCase{"prefill_sharp", 64, 8, 2, 16, {{150, 150}}, 0, false, 0, 6.0f},
        // Sliding window and sinks (GPT-OSS), both kernels.
        AttentionCase{"window_prefill", 64, 8, 2, 16, {{200, 60}, {40, 40}}, 50},
        AttentionCase{"window_decode", 64, 8, 2, 16, {{200, 1}, {60, 1}}, 50},
        AttentionCase{"sinks_prefill", 64, 8, 2, 16, {{70, 70}}, 0, true},
        AttentionCase{"sinks_decode", 64, 8, 2, 16, {{70, 1}, {1, 1}}, 0, true},
        AttentionCase{"sinks_window_decode_b1", 64, 64, 8, 16, {{300, 1}}, 128, true},
        // A table far wider than the contexts: the launch's splits (chosen from the table's width) outnumber
        // the splits with keys, down to one that normalises its own output.
        AttentionCase{"decode_wide_table_one_split", 64, 64, 8, 16, {{20, 1}}, 0, true, 256},
        AttentionCase{"decode_wide_table_mixed", 128, 32, 8, 16, {{33, 1}, {700, 1}, {1, 1}, {95, 1}}, 0, false, 256},
        AttentionCase{"sinks_window_wide_table", 64, 64, 8, 16, {{3000, 1}, {40, 1}}, 128, true, 256},
        // Many sequences in a graph-wide table: the launch's splits are chosen for 4096 keys, each sequence's
        // CTAs use fewer (one where the batch fills a wave).
        AttentionCase{"decode_b64_wide_table", 64, 32, 8, 16, decode_batch(64, 600, 4), 0, false, 256},
        // q read in place from fused [q | k | v] rows (row stride (heads + 2 kv_heads) * head_dim).
        AttentionCase{"fused_rows_decode", 64, 32, 8, 16, decode_batch(8, 600, 3), 0, false, 0, 1.0f, 2 * 8 * 64},
        AttentionCase{"fused_rows_prefill", 128, 32, 8, 16, {{300, 37}, {90, 90}, {70, 1}}, 0, false, 0, 1.0f,
                      2 * 8 * 128}),
    [](const ::testing::TestParamInfo<AttentionCase>& test) { return test.param.name; });

}  // namespace
}  // namespace drift::testing
