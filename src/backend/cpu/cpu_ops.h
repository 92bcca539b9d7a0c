// CpuOps: the reference backend. fp32 everywhere, simple loops (OpenMP across rows), OpenBLAS for linear.
// It is the oracle every other backend is tested against, so clarity wins over speed here.
#pragma once

#include "backend/ops.h"

namespace drift::backend {

// Below this many elements an op runs on one thread: waking OpenMP's team costs more than the work, and
// on a busy machine a spinning team makes a decode step many times slower.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::kCpu; }
  const char* name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::kF32; }

  Buffer alloc(DType dtype, std::initializer_list<int64_t> shape) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void synchronize() override {}
  size_t free_memory_bytes() const override;

  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) override;
  void embedding_part(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override;
  void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, float eps, const Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out) override;
  void rope(const Tensor& q, const Tensor& k, const Tensor& positions, const RopeParams& p) override;
  void silu_mul(const Tensor& gate_up, const Tensor& out) override;
  void gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  void scatter_rows(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  // F32, BF16 and F8E4M3 caches (the oracle reads each); everything else the CPU runs, but DSA-lite over FP8.
  Status supports(const AttentionShape& shape) const override;
  using Ops::supports;
  using Ops::write_kv;
  void write_kv(const WriteKvParams& p) override;
  void paged_attention(const PagedAttentionParams& p) override;
  void indexer_topk(const IndexerTopkParams& p) override;
  void sparse_paged_attention(const SparseAttentionParams& p) override;
  void key_bounds(const KeyBoundsParams& p) override;
  void score_blocks(const BlockScoreParams& p) override;
  bool supports_mla_prefill(int64_t nope, int64_t rope, int64_t v) const override;
  void gather_context(const GatherContextParams& p) override;
  void mla_prefill_attention(const MlaPrefillParams& p) override;
  void concat(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void batched_linear(const Tensor& x, const Tensor& w, const Tensor& out) override;
  void moe_route(const MoeRouteParams& p) override;
  void moe_experts(const MoeExpertsParams& p) override;
};

}  // namespace drift::backend
