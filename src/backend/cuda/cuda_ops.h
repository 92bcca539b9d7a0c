// CudaOps: the CUDA backend. Weights, activations and the KV cache are bf16, every op accumulates in
// fp32 (contract 12), logits come out fp32. All work is queued on one stream the backend owns; ops never
// allocate or synchronise (contract 11), so the runner may capture a step into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/ops.h"
#include "drift/status.h"

namespace drift::backend {

namespace cuda {
class CublasLt;
struct AttentionParams;
enum class MlaKernel : uint8_t;
}

// Families of ops a diagnostic run can leave out of every step (CudaOptions::omitted_families).
enum class OpFamily : uint32_t {
  kAttention = 1,   // paged attention, every kernel (GQA, MLA, sparse)
  kNorms = 2,       // rms_norm, add_rms_norm
  kRopeWrite = 4,   // rope_write_kv, write_kv
  kLinears = 8,     // linears with bf16 outputs, linear_silu_mul, batched_linear
  kLogits = 16,     // linears with fp32 outputs (the lm_head, routers)
  kExperts = 32,    // routed experts
};

struct CudaOptions {
  int device = 0;
  // Linears of at most 4 rows (decode) through the GEMV kernel instead of cuBLASLt.
  bool small_batch_gemv = true;
  // linear_silu_mul of at most 4 rows as one GEMV whose CTAs hold each gate row with its up row and
  // write the activation (else the GEMV, then silu_mul). Off: on an H200 the pair is faster at batch 1
  // on the Llama shapes (8B 5.13 against 5.38 ms a step, 1B 1.067 against 1.084), DeepSeek-V2-Lite's small
  // shared experts 0.8% slower (bench/RESULTS.md, 2026-11-28, thirteenth session).
  bool fuse_swiglu_gemv = false;
  // The GEMV's warps per weight row picked by each warp's load iterations (a short row split less far,
  // any matrix as many CTAs as fill the GPU) instead of by bytes per CTA with a 16 KB floor per CTA
  // (GPT-OSS-20B batch 1 on an H200: 2.094 against 2.148 ms a step; the Llama shapes alike or better).
  bool gemv_split_by_iterations = true;
  // Linears of at most 4 rows (not the SwiGLU epilogue) through the streaming GEMV (ops/gemv_stream.cu:
  // CTAs resident for the whole matrix, loads running on across rows) instead of one row group a CTA
  // (batch-1 steps on an H200: Llama-3.1-8B 5.062 -> 4.818 ms, Llama-3.2-1B 1.042 -> 0.995, GPT-OSS-20B
  // 2.006 -> 1.998; drift_bench_decode --ablate, bench/RESULTS.md 2026-11-29, sixteenth session).
  bool gemv_stream = true;
  // MLA attention on tensor cores where the shape allows (else the CUDA-core kernel everywhere).
  bool mla_tensor_cores = true;
  // MLA attention on warpgroup MMA (ops/mla_attention_wgmma.cu: the latent rows as the products' M, the heads
  // as N) where the shape allows (bf16 latents; FP8 ones stay on mma.sync), before either mma.sync form.
  // drift_bench_mla on an H200 against the mma.sync kernel: 16 heads x 576 at 64 x 4k 116.3 -> 104.4 us,
  // 1 x 32k 28.0 -> 22.2; MLA-lite's 32 x 416 at 64 x 8k 373.7 -> 197.6; 128 heads at 64 x 4k 804 -> 448.
  bool mla_wgmma = true;
  // MLA prefill in the expanded form (model/layers/mla_attention.h) where the head widths allow (else
  // absorbed, as decode).
  bool mla_expanded_prefill = true;
  // The most key splits an MLA decode launch may use (0: the split rule's own cap, kMlaMaxSplits); a
  // benchmark's knob for where the rule should stop (drift_bench_mla --max-splits).
  int32_t mla_max_splits = 0;
  // The same for GQA decode attention (0: kDecodeMaxSplits; drift_bench_kv_attention --max-splits).
  int32_t decode_max_splits = 0;
  // Decode attention on CUDA cores at few (token, kv head) pairs: several CTAs per pair, each over a slice of
  // the group's query heads (CudaOps::decode_head_slices), instead of one CTA per pair. Faster alone
  // (GPT-OSS-20B, batch 1 x 512 keys: 8.1 against 12.3 us a call) but slower in whole steps (batch-1 graph steps
  // on an H200: GPT-OSS-20B 2.031 -> 2.090 ms, Llama-3.1-8B 4.709 -> 4.882; bench/RESULTS.md 2026-11-29), so off.
  bool decode_head_slices = false;
  // Decode attention over FP8 caches on tensor cores where the shape allows (else on CUDA cores).
  bool fp8_tensor_cores = true;
  // bf16 routed experts on tensor cores where the shape allows (else the CUDA-core kernel everywhere).
  bool moe_tensor_cores = true;
  // Routed experts at one token: each choice read directly, the input row from shared memory (else
  // grouped as for larger batches).
  bool moe_one_token_kernels = true;
  // Those one-token products on CTAs resident for all the choices' rows, walking (choice, m-tile) items with
  // the next item's weights in flight during this one's reduction (ops/moe_mma.cu), instead of a CTA per
  // item. Off until measured on a GPU (drift_bench_moe times both).
  bool moe_one_token_stream = false;
  // Routed experts' prefill tiles (64 tokens, more than 12 pairs an expert) on Hopper's warpgroup MMA (wgmma,
  // the inputs from shared memory) instead of mma.sync (GPT-OSS-20B's experts on an H200: 512 tokens 623 ->
  // 434 us a layer, 4096 3,574 -> 2,426; drift_bench_moe times both).
  bool moe_wgmma = true;
  // Those wgmma tiles 128 pairs wide where an expert averages 48 pairs or more (its weights decoded once for
  // twice the tokens; ops/moe_mma.cu). Off until measured on a GPU (drift_bench_moe times both).
  bool moe_wgmma_wide = false;
  // cuBLASLt products of at most this many rows time the heuristic's best few algorithms on their first
  // call and keep the fastest (0: the heuristic's first pick everywhere).
  int64_t gemm_autotune_max_rows = 256;
  // Steps whose sequences have at most this many new tokens each (PagedAttentionParams::max_query_len:
  // speculative verify steps, a draft tree or chain) and whose prefill-kernel grid would not fill the SMs
  // once attend through the split-KV decode kernel, one CTA per token and kv head and the keys split
  // across the GPU, instead of the prefill kernel's few query tiles walking every key (8B verify of a
  // 16-node tree on an H100: 8.03 -> 6.95 ms a step at context 512, 35.1 -> 14.0 at 8k, 116.5 -> 34.2 at
  // 32k). 0: the prefill kernel for every step of several tokens a sequence.
  int32_t split_kv_max_tokens_per_seq = 80;
  size_t cublas_workspace_bytes = size_t(32) << 20;
  // Split-KV partial results of decode attention; bounds the number of splits.
  size_t attention_workspace_bytes = size_t(64) << 20;
  // Diagnostics only (drift_bench_decode --omit-families): OpFamily bits whose ops queue nothing, so that a
  // captured step's time without them says what they cost inside it. Their outputs are then stale.
  uint32_t omitted_families = 0;
};

// CUDA devices usable from this process: 0 without a driver or a GPU. Never aborts.
int cuda_device_count();

// The CUDA backend on options.device; an error Status when there is no such device.
Expected<std::unique_ptr<Ops>> make_cuda_ops(const CudaOptions& options = {});

class CudaOps final : public Ops {
 public:
  explicit CudaOps(const CudaOptions& options);
  ~CudaOps() override;

  Device device() const override { return Device::kCuda; }
  void bind_thread() override;
  const char* name() const override { return "cuda"; }
  DType compute_dtype() const override { return DType::kBF16; }

  Buffer alloc(DType dtype, std::initializer_list<int64_t> shape) override;
  // Page-locked host memory (cudaHostAlloc).
  Buffer alloc_host(DType dtype, std::initializer_list<int64_t> shape) override;
  std::unique_ptr<QueueMark> make_mark() override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  // Returns once the bytes are on the host (it waits for the work queued before it).
  void copy_to_host(void* dst, const Tensor& src) override;
  void synchronize() override;
  size_t free_memory_bytes() const override;

  // CUDA graphs: stream capture of this backend's stream (thread-local mode), replayed on it.
  bool supports_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<CapturedWork> end_capture() override;

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
  using Ops::write_kv;
  void write_kv(const WriteKvParams& p) override;
  void paged_attention(const PagedAttentionParams& p) override;
  // DSA-lite (cuda_dsa.cc): the indexer's scoring and radix-select kernels, and attention over the chosen
  // positions on the decode kernel (GQA caches) or the latent kernels (a shared latent).
  // MLA's expanded prefill (cuda_mla_prefill.cc): nope, rope and v multiples of 8, nope + rope <= 192, v <= 128.
  bool supports_mla_prefill(int64_t nope, int64_t rope, int64_t v) const override;
  void gather_context(const GatherContextParams& p) override;
  void mla_prefill_attention(const MlaPrefillParams& p) override;
  void indexer_topk(const IndexerTopkParams& p) override;
  void sparse_paged_attention(const SparseAttentionParams& p) override;
  void key_bounds(const KeyBoundsParams& p) override;
  void score_blocks(const BlockScoreParams& p) override;
  void rope_write_kv(const Tensor& q, const Tensor& positions, const RopeParams& rope, const WriteKvParams& kv) override;
  void linear_silu_mul(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& gate_up,
                       const Tensor& act) override;
  void concat(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void batched_linear(const Tensor& x, const Tensor& w, const Tensor& out) override;
  // Mixture of experts (cuda_moe.cc): routing on the GPU (every MoeRouteParams variant), experts kept in
  // MXFP4 (GPT-OSS) or in bf16 (DeepSeek; FP8 checkpoints are converted to bf16 at load).
  void moe_route(const MoeRouteParams& p) override;
  void moe_experts(const MoeExpertsParams& p) override;
  bool reads_weight_format(WeightFormat format) const override { return format == WeightFormat::kMxfp4; }
  size_t moe_workspace_bytes(const MoeShape& shape, int64_t max_tokens) const override;
  int64_t moe_width_multiple(const MoeShape& shape) const override;
  void copy(const Tensor& src, const Tensor& dst) override;

  Status supports(const AttentionShape& shape) const override { return check_attention(shape); }
  Status supports(const MoeShape& shape) const override { return check_moe(shape); }
  // The same answers without a device (they depend on the kernels this build has, not on the GPU).
  static Status check_attention(const AttentionShape& shape);
  static Status check_moe(const MoeShape& shape);

  // The stream every op is queued on (for events and graph capture).
  cudaStream_t stream() const { return stream_; }
  int num_sms() const { return num_sms_; }
  const CudaOptions& options() const { return options_; }
  // Benchmarks compare the GEMV kernel with cuBLASLt on the same loaded model.
  void set_small_batch_gemv(bool on) { options_.small_batch_gemv = on; }
  void set_fuse_swiglu_gemv(bool on) { options_.fuse_swiglu_gemv = on; }
  void set_gemv_split_by_iterations(bool on) { options_.gemv_split_by_iterations = on; }
  void set_gemv_stream(bool on) { options_.gemv_stream = on; }
  void set_mla_tensor_cores(bool on) { options_.mla_tensor_cores = on; }
  void set_mla_expanded_prefill(bool on) { options_.mla_expanded_prefill = on; }
  void set_mla_max_splits(int32_t n) { options_.mla_max_splits = n; }
  void set_decode_max_splits(int32_t n) { options_.decode_max_splits = n; }
  void set_decode_head_slices(bool on) { options_.decode_head_slices = on; }
  void set_mla_wgmma(bool on) { options_.mla_wgmma = on; }
  void set_fp8_tensor_cores(bool on) { options_.fp8_tensor_cores = on; }
  void set_moe_tensor_cores(bool on) { options_.moe_tensor_cores = on; }
  void set_moe_one_token_kernels(bool on) { options_.moe_one_token_kernels = on; }
  void set_moe_wgmma(bool on) { options_.moe_wgmma = on; }
  void set_moe_wgmma_wide(bool on) { options_.moe_wgmma_wide = on; }
  void set_moe_one_token_stream(bool on) { options_.moe_one_token_stream = on; }
  void set_omitted_families(uint32_t families) { options_.omitted_families = families; }

 private:
  // Queues attention with checked parameters: the latent kernels (v_cache null), else split-KV decoding
  // (one token per sequence, or a sparse step) or the tensor-core prefill kernel.
  // max_query_len: PagedAttentionParams::max_query_len (0: unknown).
  void launch_attention(cuda::AttentionParams a, int32_t max_query_len = 0);
  // Split-KV factor of the decode attention kernel for this step's shapes (a.head_slices and a.split_slots set).
  int32_t decode_splits(const cuda::AttentionParams& a) const;
  int32_t decode_split_slots(const cuda::AttentionParams& a) const;  // decode CTAs resident at once
  int32_t decode_head_slices(const cuda::AttentionParams& a) const;  // CTAs per (token, kv head) and split
  // Whether this split-KV step runs the FP8 tensor-core kernel.
  bool fp8_on_tensor_cores(const cuda::AttentionParams& a) const;
  // Split-KV factor of the latent attention kernel (MLA) for this step's shapes.
  int32_t mla_splits(const cuda::AttentionParams& a, cuda::MlaKernel kernel) const;
  void moe_experts_bf16(const MoeExpertsParams& p);
  bool omitted(OpFamily family) const { return (options_.omitted_families & uint32_t(family)) != 0; }

  CudaOptions options_;
  cudaStream_t stream_ = nullptr;
  int num_sms_ = 0;
  // Decode attention's per-(token, kv head) split counters: its last split merges the rest (one launch).
  static constexpr int64_t kMaxSplitCounters = 1 << 16;
  std::shared_ptr<void> cublas_workspace_, attention_workspace_, split_counters_;
  std::unique_ptr<cuda::CublasLt> lt_;
};

}  // namespace drift::backend
