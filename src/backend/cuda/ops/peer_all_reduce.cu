// One-shot all-reduce over peer memory for decode-sized steps, optionally fused with the residual add and
// RMSNorm after it (PeerAllReduceParams in launch.h). One block per row on every rank:
//
//   send     this rank's row, 16 bytes a thread, stored straight into each peer's inbox (NVLink writes);
//   receive  every rank's row in rank order: its own from registers, a peer's by polling the local inbox
//            until no element reads as empty (data and signal are the same bytes, so a receiver waits
//            for one NVLink write, not for a write, a fence and a flag);
//   empty    the inbox half just read, for the call after next;
//   finish   x = sum, or residual += sum and out = rms_norm(residual) * weight.
//
// Inboxes alternate by the parity of the rank's call count (`turn`). A peer writes this rank's half h
// again two calls later, which it reaches only after this rank's next call sent it data, so after this
// call's emptying stores have completed. Every rank makes the same calls (NcclCommunicator decides from
// sizes alone), so the turns agree. A set abort flag (host memory) ends the waits of a failed group.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"

namespace drift::backend::cuda {

namespace {

constexpr int kThreads = 512;
constexpr uint32_t kEmptyHalf = kPeerEmptyByte * 0x0101u;
constexpr uint32_t kEmptyWord = kEmptyHalf * 0x10001u;

__device__ __forceinline__ void store_volatile16(void* p, const uint4& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ uint4 load_volatile16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ bool holds_empty(uint32_t w) { return (w & 0xFFFFu) == kEmptyHalf || (w >> 16) == kEmptyHalf; }

__device__ __forceinline__ bool arrived(const uint4& v) {
  return !(holds_empty(v.x) || holds_empty(v.y) || holds_empty(v.z) || holds_empty(v.w));
}

// A value with the empty pattern (-1.2e-38) goes as -0, on every rank alike.
__device__ __forceinline__ uint32_t sendable(uint32_t w) {
  if ((w & 0xFFFFu) == kEmptyHalf) w = (w & 0xFFFF0000u) | 0x8000u;
  if ((w >> 16) == kEmptyHalf) w = (w & 0x0000FFFFu) | 0x80000000u;
  return w;
}

__device__ __forceinline__ uint4 sendable(const uint4& v) { return {sendable(v.x), sendable(v.y), sendable(v.z), sendable(v.w)}; }

// Between polls a waiting thread sleeps ~0.1 us. Back to back on four H100s, calls of 48-128 rows sometimes
// took 0.5-1.2 ms instead of ~12 us (results exact; decode steps, whose calls have work between them, were
// not slowed): the suspect is tens of thousands of threads polling the very lines the peers' NVLink writes
// land in. Two GPUs measure the same with the sleep as without; four are not yet measured with it.
__device__ __forceinline__ uint4 wait_arrival(const void* p, const volatile int* abort_flag) {
  uint4 v = load_volatile16(p);
  for (uint32_t spins = 1; !arrived(v); ++spins) {
    if (spins % 1024 == 0 && *abort_flag != 0) break;  // host memory: looked at once in a while
    __nanosleep(100);
    v = load_volatile16(p);
  }
  return v;
}

// Where sender's row of this block lies in owner's inbox half of this turn.
__device__ __forceinline__ char* inbox_row(const PeerAllReduceParams& p, uint32_t turn, int owner, int sender) {
  return static_cast<char*>(p.inboxes[owner]) + (int64_t(turn) * p.world + sender) * p.inbox_bytes +
         int64_t(blockIdx.x) * p.hidden * int64_t(sizeof(bf16));
}

// The sum over ranks of unit u of this block's row, rounded to bf16 as the dtype's all-reduce would.
__device__ __forceinline__ void sum_ranks(const PeerAllReduceParams& p, uint32_t turn, int u, const uint4& mine,
                                          float (&sum)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) sum[j] = 0.0f;
  for (int r = 0; r < p.world; ++r) {
    const uint4 raw = r == p.rank ? mine : wait_arrival(inbox_row(p, turn, p.rank, r) + u * 16, p.abort_flag);
    float v[8];
    bf16x8_to_float(raw, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum[j] += v[j];
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) sum[j] = __bfloat162float(__float2bfloat16(sum[j]));
}

// The last block of this rank's call moves the rank to its next turn.
__device__ __forceinline__ void end_call(const PeerAllReduceParams& p) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(p.arrived, 1u) == gridDim.x - 1) {
    *p.arrived = 0;
    atomicAdd(p.turn, 1u);
  }
}

// grid: rows; block: kThreads, each thread kUnits 16-byte units of the row at most.
template <int kUnits, bool kNorm>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(PeerAllReduceParams p) {
  __shared__ uint32_t turn;
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  if (threadIdx.x == 0) turn = *reinterpret_cast<volatile uint32_t*>(p.turn) & 1u;
  __syncthreads();
  const int units = p.hidden / 8;
  const int64_t row = int64_t(blockIdx.x) * p.hidden;
  uint4 mine[kUnits];
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    const int u = int(threadIdx.x) + k * kThreads;
    if (u >= units) continue;
    mine[k] = sendable(load16(p.x + row + u * 8));
    for (int r = 0; r < p.world; ++r)
      if (r != p.rank) store_volatile16(inbox_row(p, turn, r, p.rank) + u * 16, mine[k]);
  }
  float v[kUnits][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    const int u = int(threadIdx.x) + k * kThreads;
    if (u >= units) continue;
    sum_ranks(p, turn, u, mine[k], v[k]);
    for (int r = 0; r < p.world; ++r)
      if (r != p.rank) store16(inbox_row(p, turn, p.rank, r) + u * 16, make_uint4(kEmptyWord, kEmptyWord, kEmptyWord, kEmptyWord));
    if constexpr (kNorm) {
      float res[8];
      bf16x8_to_float(load16(p.residual + row + u * 8), res);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        v[k][j] = __bfloat162float(__float2bfloat16(res[j] + v[k][j]));
        sum_sq += v[k][j] * v[k][j];
      }
      store16(p.residual + row + u * 8, float_to_bf16x8(v[k]));
    } else {
      store16(p.x + row + u * 8, float_to_bf16x8(v[k]));
    }
  }
  if constexpr (kNorm) {
    const float inv = rsqrtf(block_sum(sum_sq, scratch) / float(p.hidden) + p.eps);
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
      const int u = int(threadIdx.x) + k * kThreads;
      if (u >= units) continue;
      float w[8];
      bf16x8_to_float(load16(p.weight + u * 8), w);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[k][j] = v[k][j] * inv * w[j];
      store16(p.out + row + u * 8, float_to_bf16x8(v[k]));
    }
  }
  end_call(p);
}

template <bool kNorm>
void launch_units(const PeerAllReduceParams& p, cudaStream_t stream) {
  const int units = p.hidden / 8;
  const unsigned rows = unsigned(p.rows);
  if (units <= kThreads)
    launch(peer_all_reduce_kernel<1, kNorm>, rows, kThreads, 0, stream, p);
  else if (units <= 2 * kThreads)
    launch(peer_all_reduce_kernel<2, kNorm>, rows, kThreads, 0, stream, p);
  else
    launch(peer_all_reduce_kernel<4, kNorm>, rows, kThreads, 0, stream, p);
}

}  // namespace

void run(const PeerAllReduceParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.residual != nullptr)
    launch_units<true>(p, stream);
  else
    launch_units<false>(p, stream);
}

}  // namespace drift::backend::cuda
