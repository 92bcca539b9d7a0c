// CudaOps' SpecPV ops: checks shapes and dtypes, then the bounds and score kernels (ops/block_bounds.cu).
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/tensor_checks.h"

namespace drift::backend {

using cuda::bf16_mut;
using cuda::bf16_ptr;
using cuda::check_dtype;
using cuda::i32_ptr;

void CudaOps::key_bounds(const KeyBoundsParams& p) {
  check_dtype(p.k_cache, DType::kBF16, "key_bounds k_cache");
  check_dtype(p.key_min, DType::kBF16, "key_bounds key_min");
  check_dtype(p.key_max, DType::kBF16, "key_bounds key_max");
  check_dtype(p.entries, DType::kI32, "key_bounds entries");
  DRIFT_CHECK(p.k_cache.ndim == 4 && p.entries.ndim == 2 && p.entries.size(1) == 2, "cuda key_bounds: cache {}, entries {}",
              p.k_cache.describe(), p.entries.describe());
  const int64_t row = p.k_cache.size(2) * p.k_cache.size(3);
  DRIFT_CHECK(p.key_min.numel() == p.k_cache.size(0) * row && p.key_max.numel() == p.key_min.numel(),
              "cuda key_bounds: bounds {} beside a {} cache", p.key_min.describe(), p.k_cache.describe());
  cuda::run(cuda::KeyBoundsLaunch{.k_cache = bf16_ptr(p.k_cache), .key_min = bf16_mut(p.key_min),
                                  .key_max = bf16_mut(p.key_max), .entries = i32_ptr(p.entries),
                                  .num_entries = int32_t(p.entries.size(0)), .block_size = int32_t(p.k_cache.size(1)),
                                  .row = int32_t(row)},
            stream_);
}

void CudaOps::score_blocks(const BlockScoreParams& p) {
  check_dtype(p.key_min, DType::kBF16, "score_blocks key_min");
  check_dtype(p.key_max, DType::kBF16, "score_blocks key_max");
  check_dtype(p.q, DType::kBF16, "score_blocks q");
  check_dtype(p.rows, DType::kI32, "score_blocks rows");
  check_dtype(p.blocks, DType::kI32, "score_blocks blocks");
  check_dtype(p.scores, DType::kF32, "score_blocks scores");
  DRIFT_CHECK(p.q.ndim == 3 && p.key_min.ndim == 3 && p.key_max.numel() == p.key_min.numel(),
              "cuda score_blocks: queries {} against bounds {} and {}", p.q.describe(), p.key_min.describe(),
              p.key_max.describe());
  const int64_t heads = p.q.size(1), dim = p.q.size(2), kv_heads = p.key_min.size(1);
  DRIFT_CHECK(p.key_min.size(2) == dim && heads % kv_heads == 0, "cuda score_blocks: queries {} against bounds {}",
              p.q.describe(), p.key_min.describe());
  const int64_t segments = p.rows.size(0), width = p.blocks.size(1);
  DRIFT_CHECK(p.rows.ndim == 2 && p.rows.size(1) == 2 && p.blocks.ndim == 2 && p.blocks.size(0) == segments &&
                  p.scores.numel() == segments * width,
              "cuda score_blocks: rows {}, blocks {}, scores {}", p.rows.describe(), p.blocks.describe(),
              p.scores.describe());
  cuda::run(cuda::BlockScoreLaunch{.key_min = bf16_ptr(p.key_min), .key_max = bf16_ptr(p.key_max), .q = bf16_ptr(p.q),
                                   .q_row_stride = p.q_row_stride != 0 ? p.q_row_stride : heads * dim,
                                   .rows = i32_ptr(p.rows), .blocks = i32_ptr(p.blocks),
                                   .scores = p.scores.data_as<float>(), .num_segments = int32_t(segments),
                                   .width = int32_t(width), .heads = int32_t(heads), .kv_heads = int32_t(kv_heads),
                                   .dim = int32_t(dim), .quest = p.form == BlockScore::kQuest},
            stream_);
}

}  // namespace drift::backend
