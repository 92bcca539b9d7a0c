// Thin wrappers over Hopper's warpgroup MMA (sm_90a): wgmma.mma_async with A from registers (each warp's
// 16 rows in mma.sync m16n8k16's A fragment layout) or from shared memory, and B from shared memory through
// a matrix descriptor, fp32 accumulators laid out per warp as mma.sync's C fragments, one per 8 columns.
//
// B is K-major (each column's k values contiguous: a token's inputs) in rows of 64 bf16 (128 bytes) with the
// 128-byte swizzle: within each 1024-byte atom of 8 rows, 16-byte unit u of row r sits at unit u ^ (r % 8).
// The atom must be 1024-byte aligned; the k16 slice j of a row starts 32 j bytes in.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/mma.cuh"

namespace drift::backend::cuda {

// Byte offset of 16-byte unit `unit` of row `row` in a 128-byte-swizzled K-major tile.
__device__ __forceinline__ uint32_t swizzled_unit(int row, int unit) {
  return uint32_t(row) * 128u + uint32_t((unit ^ (row % 8)) * 16);
}

// The descriptor of a K-major, 128-byte-swizzled operand whose k16 slice starts at shared address `addr`
// (the tile's base + 32 bytes per slice): stride 1024 bytes between atoms of 8 rows; the leading offset
// is unused by this layout (1, as CUTLASS sets it). The same descriptor reads those rows MN-major (an A
// operand with kTransA: a k16 slice is 16 rows, two atoms, from `addr`; M = 64 is one 128-byte row).
__device__ __forceinline__ uint64_t kmajor_sw128_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Orders this thread's earlier register writes (A fragments, accumulators) before the wgmmas that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Makes this thread's shared-memory writes (st.shared, cp.async) visible to the async proxy wgmma reads B
// through; every writer calls it before the barrier that precedes the wgmmas.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d[64 x 64] += a[64 x 16] (registers) * b[16 x 64] (descriptor). d[4 j + i] is the warp's C fragment i of
// columns 8 j .. 8 j + 7.
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

// d[64 x n] (+)= a[64 x 16] * b[16 x n], both from shared memory through descriptors, n 16 or 32: a K-major
// (kTransA false) or MN-major (true: each k's 64 m values contiguous, as a row-major [k][m] tile read
// transposed), b K-major.
template <int kN, bool kTransA>
__device__ __forceinline__ void wgmma_m64nk16_ss(float (&d)[kN / 2], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  static_assert(kN == 16 || kN == 32, "m64n16k16 and m64n32k16 only");
  if constexpr (kN == 16) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransA)));
  } else {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransA)));
  }
}

}  // namespace drift::backend::cuda
