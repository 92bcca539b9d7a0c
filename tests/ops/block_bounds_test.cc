// SpecPV's key bounds and block scores on the CUDA backend against the CPU backend (contract 6), on the
// same bf16 keys and queries: bounds bit for bit (a min or max of bf16 values is one of them); scores
// within 1e-4 of each segment's largest score magnitude (fp32 sums against the CPU's double). Shapes: the
// default model's (6 heads over 2 KV heads of 64), Llama-3.1-8B's (32 over 8 of 128), an MLA latent (16 heads
// over one 576-wide row), a head dim that is no multiple of the kernel's 64-feature tile, partial blocks,
// several segments of different rows and widths with -1 tails, more (query, head) pairs than one tile, and
// scores that already hold values (the max over layers).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <ostream>
#include <string>

#include "op_test_util.h"

namespace drift::testing {
namespace {

struct BoundsCase {
  std::string name;
  int64_t heads = 6, kv_heads = 2, dim = 64, block_size = 16, num_blocks = 40;
  std::vector<int32_t> seq_rows;    // query rows of each segment
  std::vector<int32_t> seq_tokens;  // tokens of each segment's sequence
  int64_t row_stride_pad = 0;       // extra elements after each query row (a fused q/k/v output)
};

void PrintTo(const BoundsCase& c, std::ostream* os) { *os << c.name; }

class CudaBlockBoundsTest : public CudaOpsTest, public ::testing::WithParamInterface<BoundsCase> {};

TEST_P(CudaBlockBoundsTest, BoundsAndScoresMatchTheCpu) {
  const BoundsCase& c = GetParam();
  const int64_t row = c.kv_heads * c.dim, segments = int64_t(c.seq_rows.size());
  const std::vector<float> keys = random_values(c.num_blocks * c.block_size * row);
  // Each segment's blocks: a random permutation's slices, so segments own different blocks.
  std::vector<int32_t> perm(size_t(c.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng_);
  int64_t width = 0;
  for (int32_t t : c.seq_tokens) width = std::max<int64_t>(width, (t + c.block_size - 1) / c.block_size);
  std::vector<int32_t> entries, rows, blocks(size_t(segments * width), -1);
  int32_t next = 0, first_row = 0;
  for (int64_t s = 0; s < segments; ++s) {
    const int32_t tokens = c.seq_tokens[size_t(s)];
    for (int32_t b = 0; b * c.block_size < tokens; ++b) {
      const int32_t block = perm[size_t(next++)];
      entries.insert(entries.end(), {block, int32_t(std::min<int64_t>(c.block_size, tokens - b * c.block_size))});
      blocks[size_t(s * width + b)] = block;
    }
    rows.insert(rows.end(), {first_row, first_row + c.seq_rows[size_t(s)]});
    first_row += c.seq_rows[size_t(s)];
  }
  const int64_t n = int64_t(entries.size()) / 2, stride = c.heads * c.dim + c.row_stride_pad;
  const std::vector<float> q = random_values(first_row * stride);
  std::vector<float> start = random_values(segments * width, 4.0f);  // scores already held, a layer before
  for (size_t i = 0; i < start.size(); i += 3) start[i] = -std::numeric_limits<float>::infinity();

  const std::initializer_list<int64_t> cache_shape{c.num_blocks, c.block_size, c.kv_heads, c.dim},
      bounds_shape{c.num_blocks, c.kv_heads, c.dim};
  const backend::Buffer k_gpu = gpu_bf16(keys, cache_shape), q_gpu = gpu_bf16(q, {first_row, stride});
  const backend::Buffer lo_gpu = gpu_poisoned(DType::kBF16, bounds_shape), hi_gpu = gpu_poisoned(DType::kBF16, bounds_shape);
  const backend::Buffer e_gpu = gpu_i32(entries, {n, 2}), r_gpu = gpu_i32(rows, {segments, 2}),
                        b_gpu = gpu_i32(blocks, {segments, width}), s_gpu = gpu_f32(start, {segments, width});
  gpu_->key_bounds({.k_cache = k_gpu.view, .key_min = lo_gpu.view, .key_max = hi_gpu.view, .entries = e_gpu.view});
  for (backend::BlockScore form : {backend::BlockScore::kQuest, backend::BlockScore::kSpecPv}) {
    SCOPED_TRACE(form == backend::BlockScore::kQuest ? "quest" : "specpv");
    // The CPU gets the same bf16 values in fp32: bounds exact either way.
    const backend::Buffer k_cpu = cpu_f32(keys, cache_shape), q_cpu = cpu_f32(q, {first_row, stride});
    const backend::Buffer lo_cpu = cpu_f32(std::vector<float>(size_t(c.num_blocks * row), NAN), bounds_shape),
                          hi_cpu = cpu_f32(std::vector<float>(size_t(c.num_blocks * row), NAN), bounds_shape);
    const backend::Buffer e_cpu = cpu_i32(entries, {n, 2}), r_cpu = cpu_i32(rows, {segments, 2}),
                          b_cpu = cpu_i32(blocks, {segments, width}), s_cpu = cpu_f32(start, {segments, width});
    cpu_->key_bounds({.k_cache = k_cpu.view, .key_min = lo_cpu.view, .key_max = hi_cpu.view, .entries = e_cpu.view});
    const backend::Buffer s_run = gpu_f32(start, {segments, width});
    cpu_->score_blocks({.key_min = lo_cpu.view, .key_max = hi_cpu.view,
                        .q = Tensor(q_cpu.view.data, DType::kF32, {first_row, c.heads, c.dim}, Device::kCpu),
                        .q_row_stride = stride, .rows = r_cpu.view, .blocks = b_cpu.view, .scores = s_cpu.view, .form = form});
    gpu_->score_blocks({.key_min = lo_gpu.view, .key_max = hi_gpu.view,
                        .q = Tensor(q_gpu.view.data, DType::kBF16, {first_row, c.heads, c.dim}, Device::kCuda),
                        .q_row_stride = stride, .rows = r_gpu.view, .blocks = b_gpu.view, .scores = s_run.view, .form = form});
    // Bounds of the blocks the entries name (the rest stay poisoned on the GPU and are not compared).
    const std::vector<float> lo = read_gpu(lo_gpu.view), hi = read_gpu(hi_gpu.view);
    const std::vector<float> lo_want = read_cpu(lo_cpu.view), hi_want = read_cpu(hi_cpu.view);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < row; ++j) {
        const size_t at = size_t(entries[size_t(2 * i)] * row + j);
        ASSERT_EQ(lo[at], lo_want[at]) << "block " << entries[size_t(2 * i)] << " feature " << j;
        ASSERT_EQ(hi[at], hi_want[at]) << "block " << entries[size_t(2 * i)] << " feature " << j;
      }
    const std::vector<float> got = read_gpu(s_run.view), want = read_cpu(s_cpu.view);
    for (int64_t s = 0; s < segments; ++s) {
      double scale = 1.0;
      for (int64_t b = 0; b < width; ++b) scale = std::max(scale, double(std::abs(want[size_t(s * width + b)])));
      for (int64_t b = 0; b < width; ++b) {
        const float g = got[size_t(s * width + b)], w = want[size_t(s * width + b)];
        if (std::isinf(w)) {
          EXPECT_EQ(g, w) << "segment " << s << " block " << b;
        } else {
          EXPECT_NEAR(g, w, 1e-4 * scale) << "segment " << s << " block " << b;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaBlockBoundsTest,
    ::testing::Values(
        BoundsCase{.name = "DefaultModelOneSequence", .seq_rows = {17}, .seq_tokens = {200}},
        BoundsCase{.name = "Llama8bTreeOf64", .heads = 32, .kv_heads = 8, .dim = 128, .num_blocks = 70,
                   .seq_rows = {65}, .seq_tokens = {1000}, .row_stride_pad = 2 * 8 * 128},
        BoundsCase{.name = "MlaLatent", .heads = 16, .kv_heads = 1, .dim = 576, .block_size = 64, .num_blocks = 12,
                   .seq_rows = {3}, .seq_tokens = {700}},
        BoundsCase{.name = "OddDimSeveralSegments", .heads = 4, .kv_heads = 2, .dim = 72, .block_size = 4,
                   .num_blocks = 90, .seq_rows = {1, 9, 40}, .seq_tokens = {5, 130, 77}},
        BoundsCase{.name = "OneTokenBlocks", .heads = 2, .kv_heads = 1, .dim = 32, .block_size = 1,
                   .num_blocks = 100, .seq_rows = {2, 1}, .seq_tokens = {33, 64}}),
    [](const auto& test) { return test.param.name; });

}  // namespace
}  // namespace drift::testing
