// The routed experts' bookkeeping around the products (moe_mma.cu, moe_bf16.cu): grouping the (token, choice)
// pairs by expert into tiles, and each token's weighted sum of its experts' outputs. Grouping uses shared
// atomics, so the order of an expert's pairs within its tiles varies from run to run; each pair's output
// depends only on its own token (a tensor-core product never mixes columns), and the sum runs in choice
// order, so results do not. A pair whose expert lies outside the matrices held (another rank's, under expert
// parallelism) joins no tile and adds nothing to its token's sum.
#include <cub/block/block_scan.cuh>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/moe_workspace.h"

namespace drift::backend::cuda {

namespace {

// One CTA of kThreads >= num_experts threads; thread e owns expert e's prefix sums. Few experts take a
// small CTA: a decode step's grouping is latency, not work.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) moe_align_kernel(MoePairs p, MoeWorkspace w, int32_t tile_tokens) {
  using Scan = cub::BlockScan<int2, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t count[kThreads], first[kThreads];
  pdl_launch_dependents();
  pdl_wait();
  const int tid = threadIdx.x;
  const int64_t pairs = p.num_tokens * p.top_k;
  count[tid] = 0;
  __syncthreads();
  for (int64_t i = tid; i < pairs; i += kThreads) {
    const int32_t e = p.topk_ids[i] - p.first_expert;
    w.rank[i] = e >= 0 && e < p.num_experts ? atomicAdd(&count[e], 1) : -1;
  }
  __syncthreads();
  // (first place, first tile) of expert tid, by one exclusive scan of (pairs, tiles).
  const int32_t n = tid < p.num_experts ? count[tid] : 0;
  const int2 mine = make_int2(n, (n + tile_tokens - 1) / tile_tokens);
  int2 before, total;
  Scan(scan).ExclusiveScan(mine, before, make_int2(0, 0),
                           [](int2 a, int2 b) { return make_int2(a.x + b.x, a.y + b.y); }, total);
  first[tid] = before.x;
  for (int32_t t = 0; t < mine.y; ++t) {
    w.tile_expert[before.y + t] = tid;
    w.tile_start[before.y + t] = before.x + t * tile_tokens;
    w.tile_end[before.y + t] = min(before.x + n, before.x + (t + 1) * tile_tokens);
  }
  if (tid == 0) *w.num_tiles = total.y;
  __syncthreads();
  for (int64_t i = tid; i < pairs; i += kThreads) {
    const int32_t e = p.topk_ids[i] - p.first_expert;
    if (e >= 0 && e < p.num_experts) w.sorted[first[e] + w.rank[i]] = int32_t(i);
  }
}

constexpr int kCombineThreads = 64;

// grid: (num_tokens, ceil(hidden / 8 / kCombineThreads)); a thread sums 8 features (a decode step has one
// token, so the features are spread over CTAs rather than looped over by one).
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoePairs p, MoeWorkspace w) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * kCombineThreads + threadIdx.x;
  if (c < p.hidden / 8) {
    float sum[8] = {};
    if (p.add != nullptr) bf16x8_to_float(load16(p.add + t * p.hidden + c * 8), sum);
    for (int j = 0; j < p.top_k; ++j) {
      const int32_t e = p.topk_ids[t * p.top_k + j] - p.first_expert;
      if (e < 0 || e >= p.num_experts) continue;
      const float weight = p.topk_weights[t * p.top_k + j];
      float y[8];
      bf16x8_to_float(load16(w.expert_out + (t * p.top_k + j) * p.hidden + c * 8), y);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum[i] = fmaf(weight, y[i], sum[i]);
    }
    store16(p.out + t * p.hidden + c * 8, float_to_bf16x8(sum));
  }
}

}  // namespace

size_t moe_workspace_bytes(int64_t max_tokens, int32_t hidden, int32_t ffn, int32_t num_experts, int32_t top_k) {
  return MoeWorkspace::carve(nullptr, max_tokens * top_k, num_experts, hidden, ffn).bytes;
}

void run_moe_align(const MoePairs& p, const MoeWorkspace& w, int32_t tile_tokens, cudaStream_t stream) {
  if (p.num_experts <= 128)
    launch(moe_align_kernel<128>, 1, 128, 0, stream, p, w, tile_tokens);
  else
    launch(moe_align_kernel<1024>, 1, 1024, 0, stream, p, w, tile_tokens);
}

void run_moe_combine(const MoePairs& p, const MoeWorkspace& w, cudaStream_t stream) {
  const dim3 grid(unsigned(p.num_tokens), unsigned(ceil_div(p.hidden / 8, kCombineThreads)));
  launch(moe_combine_kernel, grid, kCombineThreads, 0, stream, p, w);
}

}  // namespace drift::backend::cuda
