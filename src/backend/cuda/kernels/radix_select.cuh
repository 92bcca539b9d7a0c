// Device pieces of a top-k by radix select over 32-bit keys (the indexer's, ops/indexer_topk.cu): a float's
// order-preserving key, warp and block prefix sums, and the search for the histogram bin holding the k-th
// largest key. Block-wide helpers are collective: every thread of the block calls them.
#pragma once

#include <cstdint>

namespace drift::backend::cuda {

// A key whose unsigned order is the float order: negative values flipped, non-negative ones with the sign
// bit set.
__device__ __forceinline__ uint32_t ordered_key(float v) {
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Lanes below this one.
__device__ __forceinline__ uint32_t lanes_below() { return (1u << (threadIdx.x % 32)) - 1u; }

__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

// Inclusive prefix sum over the block's threads (blockDim.x a multiple of 32); `scratch` holds 32 ints and
// ends holding the warps' inclusive totals (scratch[num_warps - 1]: the block's total).
__device__ __forceinline__ int block_inclusive_sum(int v, int* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  v = warp_inclusive_sum(v);
  __syncthreads();  // scratch may still be read after a previous call
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int total = warp_inclusive_sum(lane < num_warps ? scratch[lane] : 0);
    if (lane < num_warps) scratch[lane] = total;
  }
  __syncthreads();
  return warp > 0 ? v + scratch[warp - 1] : v;
}

struct BinChoice {
  int bin;    // the bin holding the k-th largest key
  int above;  // keys in the bins above it
};

// Of `bins` counts (count(b) for bin b, higher bins holding larger keys), the highest bin b whose keys
// and those of every bin above reach k (1 <= k <= the sum of all counts), into *out. Each thread owns
// ceil(bins / blockDim.x) consecutive bins and calls count() only on those.
template <class Count>
__device__ void find_kth_bin(int bins, int k, Count&& count, int* scratch, BinChoice* out) {
  const int per = (bins + int(blockDim.x) - 1) / int(blockDim.x), first = int(threadIdx.x) * per;
  const int last = min(first + per, bins);
  int local = 0;
  for (int b = first; b < last; ++b) local += count(b);
  if (threadIdx.x == 0) *out = BinChoice{0, 0};
  const int inclusive = block_inclusive_sum(local, scratch);
  const int above = scratch[blockDim.x / 32 - 1] - inclusive;  // keys in the bins of later threads
  if (local > 0 && above < k && above + local >= k) {
    int acc = above;
    for (int b = last - 1; b >= first; --b) {
      const int c = count(b);
      if (acc + c >= k) {
        *out = BinChoice{b, acc};
        break;
      }
      acc += c;
    }
  }
  __syncthreads();
}

}  // namespace drift::backend::cuda
