// CudaOps' DSA-lite ops: checks shapes and dtypes, then the indexer's kernels (ops/indexer_topk.cu) and
// attention over the chosen positions (the decode kernel for GQA caches, the latent kernels for MLA-lite).
#include <algorithm>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/tensor_checks.h"

namespace drift::backend {

using cuda::check_dtype;
using cuda::i32_ptr;

static_assert(cuda::kIndexerBins == kIndexerHistogramBins, "ops.h sizes the scratch's histograms");

void CudaOps::indexer_topk(const IndexerTopkParams& p) {
  check_dtype(p.q, DType::kBF16, "indexer_topk q");
  check_dtype(p.head_weights, DType::kBF16, "indexer_topk head_weights");
  check_dtype(p.k_cache, DType::kBF16, "indexer_topk k_cache");
  check_dtype(p.block_tables, DType::kI32, "indexer_topk block_tables");
  check_dtype(p.query_start, DType::kI32, "indexer_topk query_start");
  check_dtype(p.context_lens, DType::kI32, "indexer_topk context_lens");
  check_dtype(p.selected, DType::kI32, "indexer_topk selected");
  DRIFT_CHECK(p.scratch.defined(), "cuda indexer_topk needs its scratch (IndexerTopkParams::scratch)");
  check_dtype(p.scratch, DType::kU32, "indexer_topk scratch");
  const int32_t num_tokens = int32_t(p.q.size(0)), heads = int32_t(p.q.size(1)), dim = int32_t(p.q.size(2));
  const int32_t num_seqs = int32_t(p.context_lens.numel()), top_k = int32_t(p.selected.size(1));
  DRIFT_CHECK(cuda::indexer_supports(heads, dim),
              "cuda indexer_topk takes keys of a multiple of 8 features up to 128 and heads * features up to 1024; "
              "got {} heads of {}", heads, dim);
  DRIFT_CHECK(p.k_cache.size(2) == 1 && p.k_cache.size(3) == dim, "cuda indexer_topk: cache {} for keys of {}",
              p.k_cache.describe(), dim);
  DRIFT_CHECK_EQ(p.head_weights.numel(), int64_t(num_tokens) * heads);
  DRIFT_CHECK_EQ(p.selected.size(0), int64_t(num_tokens));
  DRIFT_CHECK_EQ(p.query_start.numel(), int64_t(num_seqs) + 1);
  DRIFT_CHECK_EQ(p.block_tables.size(0), int64_t(num_seqs));
  DRIFT_CHECK(p.sink_tokens >= 0 && p.local_window >= 0 && p.sink_tokens + p.local_window <= top_k,
              "cuda indexer_topk: {} sinks and a window of {} do not fit top_k {}", p.sink_tokens, p.local_window,
              top_k);
  DRIFT_CHECK(p.scratch.size(1) > kIndexerHistogramBins, "cuda indexer_topk: scratch {} has no room for scores",
              p.scratch.describe());
  if (p.q_positions.defined()) {
    check_dtype(p.q_positions, DType::kI32, "indexer_topk q_positions");
    DRIFT_CHECK_EQ(p.q_positions.numel(), int64_t(num_tokens));
  }
  if (p.tree_mask.defined()) {
    check_dtype(p.tree_mask, DType::kU32, "indexer_topk tree_mask");
    DRIFT_CHECK_EQ(p.tree_mask.size(0), int64_t(num_tokens));
  }
  if (num_tokens == 0) return;
  cuda::run(cuda::IndexerParams{
                .q = cuda::bf16_ptr(p.q), .head_weights = cuda::bf16_ptr(p.head_weights),
                .k_cache = cuda::bf16_ptr(p.k_cache), .block_tables = i32_ptr(p.block_tables),
                .query_start = i32_ptr(p.query_start), .context_lens = i32_ptr(p.context_lens),
                .q_positions = p.q_positions.defined() ? i32_ptr(p.q_positions) : nullptr,
                .tree_mask = p.tree_mask.defined() ? p.tree_mask.data_as<uint32_t>() : nullptr,
                .selected = static_cast<int32_t*>(p.selected.data), .keys = p.scratch.data_as<uint32_t>(),
                .keys_stride = p.scratch.size(1), .num_tokens = num_tokens, .num_seqs = num_seqs, .heads = heads,
                .dim = dim, .block_size = int32_t(p.k_cache.size(1)),
                .max_blocks_per_seq = int32_t(p.block_tables.size(1)),
                .mask_words = p.tree_mask.defined() ? int32_t(p.tree_mask.size(1)) : 0, .top_k = top_k,
                .sink_tokens = p.sink_tokens, .local_window = p.local_window, .row_begin = 0,
                .num_rows = int32_t(p.scratch.size(0)), .width = int32_t(p.scratch.size(1) - kIndexerHistogramBins)},
            num_sms_, stream_);
}

void CudaOps::sparse_paged_attention(const SparseAttentionParams& p) {
  // The decode kernel's sparse instance reads BF16 rows only (check_attention refuses DSA-lite over FP8).
  check_dtype(p.k_cache, DType::kBF16, "sparse_paged_attention k_cache");
  cuda::AttentionParams a = cuda::cache_attention_params(
      {.q = p.q, .k_cache = p.k_cache, .v_cache = p.v_cache, .out = p.out, .block_tables = p.block_tables,
       .query_start = p.query_start, .q_row_stride = p.q_row_stride, .scale = p.scale},
      "sparse_paged_attention");
  check_dtype(p.selected, DType::kI32, "sparse_paged_attention selected");
  DRIFT_CHECK_EQ(p.selected.size(0), int64_t(a.num_tokens));
  a.selected = i32_ptr(p.selected);
  a.top_k = int32_t(p.selected.size(1));
  launch_attention(a);
}

}  // namespace drift::backend
