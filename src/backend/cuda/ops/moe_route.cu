// moe_route: the top-k expert choice of MoeRouteParams (ops.h), one warp per token. Each lane scores a
// stripe of the experts into shared memory; groups (DeepSeek) and then experts are picked by repeated warp
// arg-max, ties to the lower index as on the CPU. Softmax without a correction bias chooses by the logits
// themselves (the same order as the softmax, without its rounding), so the choice matches the CPU's exactly.
#include <cfloat>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"

namespace drift::backend::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 32;
constexpr float kTaken = -INFINITY;   // an expert already chosen
constexpr float kOutside = -FLT_MAX;  // an expert of a group that does not compete

// The lane holding the largest (value, lowest index) pair of the warp; every lane gets its index.
__device__ __forceinline__ int warp_argmax(float value, int index) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, value, o);
    const int i = __shfl_xor_sync(0xffffffffu, index, o);
    if (v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
  return index;
}

// The best not-yet-taken expert in [begin, end) of `choice`, by one warp.
__device__ __forceinline__ int best_expert(const float* choice, int begin, int end) {
  float best = kTaken;
  int index = INT32_MAX;
  for (int e = begin + int(threadIdx.x % 32); e < end; e += 32)
    if (choice[e] > best || (choice[e] == best && e < index)) {
      best = choice[e];
      index = e;
    }
  return warp_argmax(best, index);
}

// score: what the weights are made of; choice: what experts are picked by (scores + bias, or the logits).
__device__ void score_experts(const RouteParams& p, const float* logits, float* score, float* choice) {
  const int lane = threadIdx.x % 32;
  float max_logit = -INFINITY, sum = 0.0f;
  if (!p.sigmoid) {
    for (int e = lane; e < p.num_experts; e += 32) max_logit = fmaxf(max_logit, logits[e]);
    max_logit = warp_max(max_logit);
    for (int e = lane; e < p.num_experts; e += 32) sum += expf(logits[e] - max_logit);
    sum = warp_sum(sum);
  }
  for (int e = lane; e < p.num_experts; e += 32) {
    const float s = p.sigmoid ? 1.0f / (1.0f + expf(-logits[e])) : expf(logits[e] - max_logit) / sum;
    score[e] = s;
    if (p.correction_bias != nullptr) choice[e] = s + p.correction_bias[e];
    else choice[e] = p.sigmoid ? s : logits[e];
  }
  __syncwarp();
}

// Marks the experts outside the topk_group best groups (a group's score: the sum of its best
// group_score_top choices). Lane g scores group g; `choice` is restored for the members it ranks.
__device__ void limit_groups(const RouteParams& p, float* choice) {
  const int lane = threadIdx.x % 32, per_group = p.num_experts / p.n_group;
  float group_score = kTaken;
  if (lane < p.n_group) {
    group_score = 0.0f;
    const float* members = choice + lane * per_group;
    float prev = INFINITY;
    int prev_index = -1;
    for (int t = 0; t < p.group_score_top; ++t) {  // the t-th best member, strictly after the previous
      float best = kTaken;
      int index = -1;
      for (int i = 0; i < per_group; ++i) {
        const float v = members[i];
        const bool after = v < prev || (v == prev && i > prev_index);
        if (after && (index < 0 || v > best)) {
          best = v;
          index = i;
        }
      }
      group_score += best;
      prev = best;
      prev_index = index;
    }
  }
  bool kept = false;
  for (int t = 0; t < p.topk_group; ++t) {
    const int g = warp_argmax(group_score, lane < p.n_group ? lane : INT32_MAX);
    if (lane == g) {
      kept = true;
      group_score = kTaken;
    }
  }
  __syncwarp();
  for (int g = 0; g < p.n_group; ++g) {
    const bool keep = __shfl_sync(0xffffffffu, kept, g);
    if (!keep)
      for (int e = g * per_group + lane; e < (g + 1) * per_group; e += 32) choice[e] = kOutside;
  }
  __syncwarp();
}

// grid: ceil(num_tokens / kWarps); block: kWarps warps; shared: 2 * num_experts floats per warp.
__global__ void route_kernel(RouteParams p) {
  extern __shared__ float smem[];
  pdl_launch_dependents();
  pdl_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarps + warp;
  if (t >= p.num_tokens) return;
  float* score = smem + warp * 2 * p.num_experts;
  float* choice = score + p.num_experts;
  score_experts(p, p.logits + t * p.num_experts, score, choice);
  if (p.n_group > 1) limit_groups(p, choice);

  int chosen = -1;  // lane j < top_k holds the j-th choice
  float sum = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    const int e = best_expert(choice, 0, p.num_experts);
    if (lane == j) chosen = e;
    sum += score[e];
    __syncwarp();
    if (lane == 0) choice[e] = kTaken;
    __syncwarp();
  }
  if (lane < p.top_k) {
    const float norm = p.renormalize ? 1.0f / (sum + 1e-20f) : 1.0f;
    p.topk_ids[t * p.top_k + lane] = chosen;
    p.topk_weights[t * p.top_k + lane] = score[chosen] * norm * p.routed_scaling_factor;
  }
}

}  // namespace

bool route_supports(int64_t num_experts, int64_t top_k, int64_t n_group) {
  return num_experts <= kMaxExperts && top_k <= kMaxTopK && n_group <= 32;
}

void run(const RouteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const size_t smem = size_t(kWarps) * 2 * size_t(p.num_experts) * sizeof(float);
  launch(route_kernel, unsigned(ceil_div(p.num_tokens, kWarps)), kWarps * 32, smem, stream, p);
}

}  // namespace drift::backend::cuda
