// The scratch of the routed experts (MoeExpertsParams::workspace), laid out the same way by the host that
// sizes it and the launchers that use it. A "pair" is one (token, choice) of topk_ids: pair = t * top_k + j.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/ops/launch.h"

namespace drift::backend::cuda {

// Tiles of at most kMinTileTokens pairs or more of one expert: the pairs of each expert cut into tiles.
inline constexpr int64_t kMinTileTokens = 8;

inline int64_t max_moe_tiles(int64_t num_pairs, int64_t num_experts, int64_t tile_tokens) {
  return (num_pairs + tile_tokens - 1) / tile_tokens + (num_experts < num_pairs ? num_experts : num_pairs);
}

struct MoeWorkspace {
  int32_t* rank = nullptr;         // [pairs]: the pair's place among its expert's pairs
  int32_t* sorted = nullptr;       // [pairs]: pair ids grouped by expert
  int32_t* tile_expert = nullptr;  // [max tiles]
  int32_t* tile_start = nullptr;   // [max tiles]: the tile's first place in `sorted`
  int32_t* tile_end = nullptr;     // [max tiles]: one past its last
  int32_t* num_tiles = nullptr;    // [1]
  bf16* act = nullptr;             // [pairs, ffn]: activations, by place in `sorted`
  bf16* expert_out = nullptr;      // [pairs, hidden]: each expert's output (bias added), by pair id
  size_t bytes = 0;

  // Carves `base` (null: only counts bytes) for up to `num_pairs` pairs.
  static MoeWorkspace carve(void* base, int64_t num_pairs, int32_t num_experts, int32_t hidden, int32_t ffn) {
    MoeWorkspace w;
    char* p = static_cast<char*>(base);
    size_t offset = 0;
    auto take = [&](auto*& field, int64_t count, size_t elem) {
      offset = (offset + 255) / 256 * 256;
      field = base == nullptr ? nullptr : reinterpret_cast<std::remove_reference_t<decltype(field)>>(p + offset);
      offset += size_t(count) * elem;
    };
    const int64_t tiles = max_moe_tiles(num_pairs, num_experts, kMinTileTokens);
    take(w.rank, num_pairs, 4);
    take(w.sorted, num_pairs, 4);
    take(w.tile_expert, tiles, 4);
    take(w.tile_start, tiles, 4);
    take(w.tile_end, tiles, 4);
    take(w.num_tiles, 1, 4);
    take(w.act, num_pairs * ffn, 2);
    take(w.expert_out, num_pairs * hidden, 2);
    w.bytes = offset;
    return w;
  }
};

// What grouping the pairs and summing the experts' outputs need of a moe_experts call, whatever format
// its expert matrices are in.
struct MoePairs {
  const int32_t* topk_ids = nullptr;      // [num_tokens, top_k]
  const float* topk_weights = nullptr;    // [num_tokens, top_k]
  bf16* out = nullptr;                    // [num_tokens, hidden]
  const bf16* add = nullptr;              // [num_tokens, hidden] or null: the sum starts from it
  int64_t num_tokens = 0;
  int32_t hidden = 0, num_experts = 0, top_k = 0;
  // Expert id of matrix 0: a pair's expert is topk_ids - first_expert, and one outside [0, num_experts)
  // belongs to another rank (expert parallelism) and is skipped.
  int32_t first_expert = 0;
};
template <class ExpertsParams>
MoePairs moe_pairs(const ExpertsParams& p) {
  return {.topk_ids = p.topk_ids, .topk_weights = p.topk_weights, .out = p.out, .add = p.add, .num_tokens = p.num_tokens,
          .hidden = p.hidden, .num_experts = p.num_experts, .top_k = p.top_k, .first_expert = p.first_expert};
}

// Groups the pairs by expert and cuts each expert's into tiles of at most tile_tokens (one CTA).
void run_moe_align(const MoePairs& p, const MoeWorkspace& w, int32_t tile_tokens, cudaStream_t stream);
// out[t] = add[t] (when given) + sum_j topk_weights[t, j] * expert_out[t * top_k + j]. hidden % 8 == 0.
void run_moe_combine(const MoePairs& p, const MoeWorkspace& w, cudaStream_t stream);

#ifdef __CUDACC__
// One CTA's share of the grouped pairs: places [start, start + count) of `sorted`, all of one expert.
struct MoeTile {
  int32_t expert, start, count;
};
__device__ __forceinline__ MoeTile moe_tile(const MoeWorkspace& w, int index) {
  return {w.tile_expert[index], w.tile_start[index], w.tile_end[index] - w.tile_start[index]};
}
#endif

}  // namespace drift::backend::cuda
