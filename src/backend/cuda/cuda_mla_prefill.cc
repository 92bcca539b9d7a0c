// CudaOps' MLA expanded prefill: shape and dtype checks, then ops/mla_prefill.cu's launchers.
#include <fmt/format.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/tensor_checks.h"

namespace drift::backend {

using cuda::bf16_mut;
using cuda::bf16_ptr;
using cuda::check_dtype;
using cuda::i32_ptr;

bool CudaOps::supports_mla_prefill(int64_t nope, int64_t rope, int64_t v) const {
  return options_.mla_expanded_prefill && cuda::mla_prefill_supports(nope, rope, v);
}

void CudaOps::gather_context(const GatherContextParams& p) {
  const bool fp8 = p.k_cache.dtype == DType::kF8E4M3;
  check_dtype(p.k_cache, fp8 ? DType::kF8E4M3 : DType::kBF16, "gather_context k_cache");
  if (fp8) check_dtype(p.k_scale, DType::kF32, "gather_context k_scale");
  check_dtype(p.block_tables, DType::kI32, "gather_context block_tables");
  check_dtype(p.context_lens, DType::kI32, "gather_context context_lens");
  check_dtype(p.head, DType::kBF16, "gather_context head");
  check_dtype(p.tail, DType::kBF16, "gather_context tail");
  check_dtype(p.key_start, DType::kI32, "gather_context key_start");
  const int64_t width = p.k_cache.size(3), split = p.head.size(1), num_seqs = p.context_lens.numel();
  DRIFT_CHECK(p.k_cache.size(2) == 1 && p.tail.size(1) == width - split && split % 8 == 0 && width % 8 == 0 &&
                  p.tail.size(0) == p.head.size(0),
              "cuda gather_context: rows of {} split into {} and {} (one head, at a multiple of 8)",
              p.k_cache.describe(), p.head.describe(), p.tail.describe());
  DRIFT_CHECK(p.block_tables.size(0) == num_seqs && p.key_start.numel() == num_seqs + 1,
              "cuda gather_context: {} tables and {} starts for {} sequences", p.block_tables.size(0),
              p.key_start.numel(), num_seqs);
  cuda::run(cuda::GatherContextLaunch{.cache = fp8 ? nullptr : bf16_ptr(p.k_cache),
                                      .cache8 = fp8 ? p.k_cache.data_as<uint8_t>() : nullptr,
                                      .scales = fp8 ? p.k_scale.data_as<float>() : nullptr,
                                      .block_tables = i32_ptr(p.block_tables),
                                      .context_lens = i32_ptr(p.context_lens),
                                      .head = bf16_mut(p.head),
                                      .tail = bf16_mut(p.tail),
                                      .key_start = p.key_start.data_as<int32_t>(),
                                      .num_seqs = int32_t(num_seqs),
                                      .max_blocks = int32_t(p.block_tables.size(1)),
                                      .block_size = int32_t(p.k_cache.size(1)),
                                      .width = int32_t(width),
                                      .split = int32_t(split),
                                      .rows = p.head.size(0)},
            stream_);
}

void CudaOps::mla_prefill_attention(const MlaPrefillParams& p) {
  for (const auto& [t, what] : {std::pair{&p.q_nope, "q_nope"}, std::pair{&p.q_rope, "q_rope"}, std::pair{&p.kv, "kv"},
                                std::pair{&p.k_rope, "k_rope"}, std::pair{&p.out, "out"}})
    check_dtype(*t, DType::kBF16, what);
  check_dtype(p.query_start, DType::kI32, "mla_prefill_attention query_start");
  check_dtype(p.key_start, DType::kI32, "mla_prefill_attention key_start");
  const int64_t tokens = p.q_nope.size(0), heads = p.q_nope.size(1), nope = p.q_nope.size(2);
  const int64_t rope = p.q_rope.size(2), v = p.out.size(2);
  DRIFT_CHECK(cuda::mla_prefill_supports(nope, rope, v),
              "cuda mla_prefill_attention takes nope, rope and value widths that are multiples of 8, nope + rope up "
              "to 192 and values up to 128; got {}, {}, {}",
              nope, rope, v);
  DRIFT_CHECK(p.q_rope.size(0) == tokens && p.q_rope.size(1) == heads && p.out.size(0) == tokens &&
                  p.out.size(1) == heads && p.kv.size(1) == heads && p.kv.size(2) == nope + v &&
                  p.k_rope.size(0) == p.kv.size(0) && p.k_rope.size(1) == rope,
              "cuda mla_prefill_attention: q {} + {}, kv {}, k_rope {}, out {}", p.q_nope.describe(),
              p.q_rope.describe(), p.kv.describe(), p.k_rope.describe(), p.out.describe());
  cuda::run(cuda::MlaPrefillLaunch{.q_nope = bf16_ptr(p.q_nope),
                                   .q_rope = bf16_ptr(p.q_rope),
                                   .kv = bf16_ptr(p.kv),
                                   .k_rope = bf16_ptr(p.k_rope),
                                   .query_start = i32_ptr(p.query_start),
                                   .key_start = i32_ptr(p.key_start),
                                   .out = bf16_mut(p.out),
                                   .num_tokens = int32_t(tokens),
                                   .num_seqs = int32_t(p.query_start.numel() - 1),
                                   .heads = int32_t(heads),
                                   .nope = int32_t(nope),
                                   .rope = int32_t(rope),
                                   .v = int32_t(v),
                                   .scale = p.scale},
            stream_);
}

}  // namespace drift::backend
