// GPU sampling: one CTA of 1024 threads per row of logits, the steps of sample() (sample/sampler.h) in
// its order. The row is never rewritten beyond the penalised entries: temperature and the filters are
// evaluated on the fly from the logit and a few per-row thresholds, so the raw logit of the chosen token
// is still there for its log-probability.
//
// Where the CPU sampler keeps a set by sorting or quickselect, this kernel finds the same threshold by
// radix selection over the float bits (8 bits per pass, 4 passes): the k-th largest logit for top-k, and
// for top-p the largest weight whose weights at or above it hold the needed mass. Every comparison and
// subtraction is the CPU's own (this file is compiled with -fmad=false, so no product is fused into a
// sum the CPU rounds twice); the exponentials are CUDA's expf (within 2 ulp) against glibc's (within 1),
// and the double sums run in another order. A token can therefore differ from the CPU's only where a
// decision sits within about 1e-6 (relative) of a boundary: tests/ops/sampler_test.cc states the margin.
#include <cfloat>
#include <climits>
#include <cmath>

#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/runtime/check.h"
#include "sample/cuda/sample_kernel.h"
#include "sample/random.h"

namespace drift::sample::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;  // radix digit of 8 bits

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// A candidate for the maximum: larger logit first, the lower token id on ties (the CPU's argmax rule).
struct Best {
  float value;
  int32_t index;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

__device__ __forceinline__ Best warp_best(Best x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best y{__shfl_xor_sync(0xffffffffu, x.value, o), __shfl_xor_sync(0xffffffffu, x.index, o)};
    x = better(x, y);
  }
  return x;
}

// Block-wide reductions; every thread gets the result. The leading barrier lets a call reuse the
// scratch a previous call is still reading.
struct Scratch {
  float f[kWarps];
  double d[kWarps];
  int32_t i[kWarps];
  uint32_t count[kBins];
  double mass[kBins];
  uint32_t digit;
  uint32_t remaining_count;
  double remaining_mass;
  float raw_chosen;
};

__device__ float block_max(float v, Scratch& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.f[threadIdx.x / 32] = v;
  __syncthreads();
  float r = -INFINITY;
  for (int w = 0; w < kWarps; ++w) r = fmaxf(r, s.f[w]);
  return r;
}

__device__ double block_sum(double v, Scratch& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.d[threadIdx.x / 32] = v;
  __syncthreads();
  double r = 0.0;
  for (int w = 0; w < kWarps; ++w) r += s.d[w];
  return r;
}

__device__ int32_t block_min_int(int32_t v, Scratch& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.i[threadIdx.x / 32] = v;
  __syncthreads();
  int32_t r = INT_MAX;
  for (int w = 0; w < kWarps; ++w) r = min(r, s.i[w]);
  return r;
}

__device__ int32_t block_max_int(int32_t v, Scratch& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.i[threadIdx.x / 32] = v;
  __syncthreads();
  int32_t r = INT_MIN;
  for (int w = 0; w < kWarps; ++w) r = max(r, s.i[w]);
  return r;
}

__device__ Best block_best(Best b, Scratch& s) {
  b = warp_best(b);
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    s.f[threadIdx.x / 32] = b.value;
    s.i[threadIdx.x / 32] = b.index;
  }
  __syncthreads();
  Best r{-INFINITY, INT_MAX};
  for (int w = 0; w < kWarps; ++w) r = better(r, Best{s.f[w], s.i[w]});
  return r;
}

// Exclusive prefix sum of one double per thread in thread order; `total` gets the sum of all.
__device__ double block_exclusive_scan(double v, double& total, Scratch& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  double exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = 0.0;
  __syncthreads();
  if (lane == 31) s.d[warp] = inclusive;
  __syncthreads();
  double before = 0.0;
  total = 0.0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += s.d[w];
    total += s.d[w];
  }
  return before + exclusive;
}

// The CPU's relative_weight(): p / p_max, exactly 1 for the maximum itself.
__device__ __forceinline__ float relative_weight(float logit, float max_logit) {
  return logit == max_logit ? 1.0f : expf(logit - max_logit);
}

// Float -> unsigned key with the same order (negative values below positive ones).
__device__ __forceinline__ uint32_t ordered_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float from_ordered_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k);
}

// The k-th largest of value(i) over i < n, counting duplicates (what std::nth_element with greater<>
// yields on the CPU). NaN values are ignored.
template <class Value>
__device__ float kth_largest(int64_t n, int32_t k, Value value, Scratch& s) {
  const int lane = threadIdx.x % 32;
  uint32_t prefix = 0, mask = 0, remaining = uint32_t(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.count[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float v = value(i);
      if (isnan(v)) continue;
      const uint32_t key = ordered_key(v);
      if ((key & mask) == prefix) atomicAdd(&s.count[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds bins 255 - 8l .. 248 - 8l, so lanes in order walk the digits from the largest.
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += (c[j] = s.count[255 - 8 * lane - j]);
      uint32_t inclusive = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t up = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += up;
      }
      uint32_t above = inclusive - sum;
      if (above < remaining && remaining <= inclusive) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (above + c[j] >= remaining) {
            s.digit = uint32_t(255 - 8 * lane - j);
            s.remaining_count = remaining - above;
            break;
          }
          above += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= s.digit << shift;
    mask |= 0xffu << shift;
    remaining = s.remaining_count;
  }
  return from_ordered_key(prefix);
}

// The largest weight t with sum(weights >= t) >= needed, over the positive weight(i), i < n; when
// rounding leaves every weight together short of `needed`, the smallest weight (the CPU's
// weight_threshold_for_mass). Positive floats order as their bits, so no key transform is needed.
template <class Weight>
__device__ float mass_threshold(int64_t n, double needed, Weight weight, Scratch& s) {
  const int lane = threadIdx.x % 32;
  uint32_t prefix = 0, mask = 0;
  double need = needed;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.mass[b] = 0.0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float w = weight(i);
      if (!(w > 0.0f)) continue;
      const uint32_t bits = __float_as_uint(w);
      if ((bits & mask) == prefix) atomicAdd(&s.mass[(bits >> shift) & 0xffu], double(w));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      double m[8], sum = 0.0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += (m[j] = s.mass[255 - 8 * lane - j]);
      double inclusive = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const double up = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += up;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, inclusive >= need);
      const unsigned nonempty = __ballot_sync(0xffffffffu, sum > 0.0);
      // The first digit (from the largest) whose mass with everything above reaches `need`; when none
      // does, the smallest non-empty digit.
      const int owner = reached != 0 ? __ffs(reached) - 1 : 31 - __clz(nonempty);
      if (lane == owner) {
        double above = inclusive - sum;
        int chosen = -1;
        double above_chosen = above;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (!(m[j] > 0.0)) continue;
          chosen = j;
          above_chosen = above;
          if (reached != 0 && above + m[j] >= need) break;
          above += m[j];
        }
        s.digit = uint32_t(255 - 8 * lane - chosen);
        s.remaining_mass = need - above_chosen;
      }
    }
    __syncthreads();
    prefix |= s.digit << shift;
    mask |= 0xffu << shift;
    need = s.remaining_mass;
  }
  return __uint_as_float(prefix);
}

// grid: num_rows; block: kThreads.
__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams p) {
  backend::cuda::pdl_launch_dependents();
  backend::cuda::pdl_wait();
  __shared__ Scratch s;
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const SampleRow r = p.rows[row];
  const int64_t vocab = p.vocab;
  float* x = p.logits + int64_t(row) * vocab;

  // 0. Structured output: tokens outside the row's mask are -inf before anything looks at the row.
  if (r.mask_row >= 0) {
    const uint32_t* mask = p.masks + int64_t(r.mask_row) * p.mask_words;
    for (int64_t i = tid; i < vocab; i += kThreads)
      if (!(mask[i >> 5] >> (i & 31) & 1u)) x[i] = -INFINITY;
    __syncthreads();
  }

  // 1. Raw log-probabilities: log-sum-exp in double, and the most likely tokens (CPU: logprobs.cc).
  double log_sum_exp = 0.0;
  if (r.top_logprobs >= 0) {
    float m = -INFINITY;
    for (int64_t i = tid; i < vocab; i += kThreads) m = fmaxf(m, x[i]);
    m = block_max(m, s);
    double sum = 0.0;
    for (int64_t i = tid; i < vocab; i += kThreads) sum += exp(double(x[i]) - double(m));
    log_sum_exp = double(m) + log(block_sum(sum, s));
    const int n = int(min64(min(r.top_logprobs, kMaxTopLogprobs), vocab));
    Best previous{INFINITY, -1};
    for (int j = 0; j < n; ++j) {
      // The best token ranked after the previous pick (descending logit, then ascending id).
      Best b{-INFINITY, INT_MAX};
      for (int64_t i = tid; i < vocab; i += kThreads) {
        const float v = x[i];
        if (v < previous.value || (v == previous.value && int32_t(i) > previous.index)) b = better(b, Best{v, int32_t(i)});
      }
      b = block_best(b, s);
      if (tid == 0) {
        p.top_tokens[row * kMaxTopLogprobs + j] = b.index;
        p.top_logprobs[row * kMaxTopLogprobs + j] = float(double(b.value) - log_sum_exp);
      }
      previous = b;
    }
  }

  // 2. Penalties (CPU: penalties.h), each listed token by one thread; the raw value is kept aside.
  for (int32_t j = r.penalty_begin + tid; j < r.penalty_end; j += kThreads) {
    const int32_t token = p.penalty_tokens[j];
    const int32_t count = p.penalty_counts[j];
    const float raw = x[token];
    p.penalty_raw[j] = raw;
    float logit = raw;
    if (r.repetition_penalty != 1.0f)
      logit = logit > 0.0f ? logit / r.repetition_penalty : logit * r.repetition_penalty;
    if ((r.frequency_penalty != 0.0f || r.presence_penalty != 0.0f) && count > 0)
      logit = logit - r.frequency_penalty * float(count) - r.presence_penalty;
    x[token] = logit;
  }
  __syncthreads();

  int32_t token = 0;
  // NaN or +Inf in a row (sample() on the CPU: a non-finite log-sum-exp) gives kNonFiniteLogits. The check
  // rides on the pass over the row each path makes anyway.
  bool non_finite = false;
  if (!(r.temperature > 0.0f)) {
    // 3. Greedy: the first index of the largest penalised logit.
    Best b{-INFINITY, INT_MAX};
    for (int64_t i = tid; i < vocab; i += kThreads) {
      non_finite = non_finite || !(x[i] < INFINITY);
      b = better(b, Best{x[i], int32_t(i)});
    }
    b = block_best(b, s);
    // All -inf (a structured-output mask that allows nothing, say) is as unsamplable as NaN.
    token = b.index == INT_MAX || b.value == -INFINITY ? kNonFiniteLogits : b.index;
    if (__syncthreads_or(non_finite)) token = kNonFiniteLogits;
  } else {
    // 4. Temperature, top-k, top-p, min-p, then the inverse-CDF draw (CPU: filters.cc, sampler.cc). The
    // CPU sets removed logits to -inf; `logit(i, stage)` is that value after `stage` filters. The largest
    // tempered logit survives every filter (top-k's threshold is at most it, its weight is 1 >= any
    // top-p threshold and >= min_p), so it is the maximum at every stage.
    const float temperature = r.temperature;
    float max_logit = -INFINITY;
    for (int64_t i = tid; i < vocab; i += kThreads) {
      non_finite = non_finite || !(x[i] < INFINITY);
      max_logit = fmaxf(max_logit, x[i] / temperature);
    }
    max_logit = block_max(max_logit, s);
    if (__syncthreads_or(non_finite) || max_logit == -INFINITY) {
      if (tid == 0) p.tokens[row] = kNonFiniteLogits;
      return;
    }

    const bool use_top_k = r.top_k > 0 && int64_t(r.top_k) < vocab;
    const bool use_top_p = r.top_p < 1.0f;
    const bool use_min_p = r.min_p > 0.0f;
    float top_k_threshold = -INFINITY, top_p_threshold = 0.0f;
    auto logit = [&](int64_t i, int stage) {
      float v = x[i] / temperature;
      if (stage >= 1 && use_top_k && v < top_k_threshold) return -INFINITY;
      if (stage >= 2 && use_top_p && relative_weight(v, max_logit) < top_p_threshold) return -INFINITY;
      if (stage >= 3 && use_min_p && relative_weight(v, max_logit) < r.min_p) return -INFINITY;
      return v;
    };
    if (use_top_k) top_k_threshold = kth_largest(vocab, r.top_k, [&](int64_t i) { return logit(i, 0); }, s);
    if (use_top_p) {
      auto weight = [&](int64_t i) { return relative_weight(logit(i, 1), max_logit); };
      double total = 0.0;
      for (int64_t i = tid; i < vocab; i += kThreads) {
        const float w = weight(i);
        if (w > 0.0f) total += w;
      }
      total = block_sum(total, s);
      top_p_threshold = mass_threshold(vocab, double(r.top_p) * total, weight, s);
    }

    // The draw: each thread walks a contiguous chunk of token ids, so a prefix sum over the threads'
    // chunk sums gives every thread the cumulative weight before its chunk.
    const float u = uniform_for(r.seed, r.position);
    const int64_t chunk = (vocab + kThreads - 1) / kThreads;
    const int64_t lo = min64(vocab, tid * chunk), hi = min64(vocab, lo + chunk);
    double local = 0.0;
    for (int64_t i = lo; i < hi; ++i) local += relative_weight(logit(i, 3), max_logit);
    double total = 0.0;
    double cumulative = block_exclusive_scan(local, total, s);
    const double target = double(u) * total;
    int32_t found = INT_MAX, last_alive = -1;
    for (int64_t i = lo; i < hi; ++i) {
      const float w = relative_weight(logit(i, 3), max_logit);
      if (w == 0.0f) continue;
      cumulative += w;
      last_alive = int32_t(i);
      if (cumulative > target) {
        found = int32_t(i);
        break;
      }
    }
    found = block_min_int(found, s);
    // Only reachable when rounding leaves the running sum a hair below u * total (as on the CPU).
    if (found == INT_MAX) found = max(0, block_max_int(last_alive, s));
    token = found;
  }

  // 5. The chosen token's raw log-probability: its logit, or the value its penalty replaced.
  if (r.top_logprobs >= 0 && token != kNonFiniteLogits) {
    if (tid == 0) s.raw_chosen = x[token];
    __syncthreads();
    for (int32_t j = r.penalty_begin + tid; j < r.penalty_end; j += kThreads)
      if (p.penalty_tokens[j] == token) s.raw_chosen = p.penalty_raw[j];
    __syncthreads();
    if (tid == 0) p.logprobs[row] = float(double(s.raw_chosen) - log_sum_exp);
  }
  if (tid == 0) p.tokens[row] = token;
}

}  // namespace

void run(const SampleParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  backend::cuda::launch(sample_kernel, unsigned(p.num_rows), kThreads, 0, stream, p);
}

}  // namespace drift::sample::cuda
