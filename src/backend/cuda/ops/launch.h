// The CUDA launchers: one plain parameter struct per kernel family, each field's shape in a comment, and
// one run(const Params&, cudaStream_t) per launcher (contract 7). CudaOps (cuda_ops.cc) checks shapes and
// dtypes and fills these; the .cu file of each op holds its kernels. Activations, weights and the KV
// cache are bf16; every kernel accumulates in fp32 (contract 12). Launchers never allocate and never
// synchronise, so a forward can be captured into a CUDA graph (contract 11).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace drift::backend::cuda {

using bf16 = __nv_bfloat16;
class CublasLt;

// out[i] = src[index[i]], whole rows of bytes (embedding lookups and gather_rows). An index outside
// [0, num_src_rows) yields a zero row. With `scatter`, out[index[i]] = src[i] instead (scatter_rows), out
// then having num_src_rows rows and an index outside them writing nothing.
struct GatherRowsParams {
  const void* src = nullptr;       // [num_src_rows, row_bytes]; [num_rows, row_bytes] with scatter
  const int32_t* index = nullptr;  // [num_rows]
  void* out = nullptr;             // [num_rows, row_bytes]; [num_src_rows, row_bytes] with scatter
  int64_t num_rows = 0, num_src_rows = 0, row_bytes = 0;
  bool scatter = false;
  int64_t first_row = 0;  // gather: index[i] - first_row is the row read (a rank's slice of the vocabulary)
};
void run(const GatherRowsParams& p, cudaStream_t stream);

// out = x / rms(x) * weight per row; with `residual` set, residual += x first (stored in bf16) and the
// rounded sum is what gets normalised, as the bf16 pre-norm transformer does.
struct RmsNormParams {
  const bf16* x = nullptr;       // [num_rows, hidden]
  bf16* residual = nullptr;      // [num_rows, hidden] or null
  const bf16* weight = nullptr;  // [hidden]
  bf16* out = nullptr;           // [num_rows, hidden]; may alias x
  int64_t num_rows = 0;
  int32_t hidden = 0;
  float eps = 1e-6f;
};
void run(const RmsNormParams& p, cudaStream_t stream);

// Rotary embedding in place over the first rotary_dim features of each head.
struct RotaryParams {
  bf16* q = nullptr;                // [num_tokens, q_row_stride]: num_q_heads rows of head_dim at the front
  bf16* k = nullptr;                // [num_tokens, k_row_stride]: num_k_heads rows of head_dim, or null
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* cos_sin = nullptr;   // [max_positions, rotary_dim]: rotary_dim/2 cos, then rotary_dim/2 sin
  int64_t num_tokens = 0;
  int64_t q_row_stride = 0, k_row_stride = 0;  // elements between consecutive tokens' rows
  int32_t num_q_heads = 0, num_k_heads = 0, head_dim = 0, rotary_dim = 0, max_positions = 0;
  bool interleaved = false;         // pairs (2i, 2i+1); otherwise (i, i + rotary_dim/2)
};
void run(const RotaryParams& p, cudaStream_t stream);

// out = silu(gate) * up.
struct SiluMulParams {
  const bf16* gate_up = nullptr;  // [num_rows, 2 * ffn]: gate then up
  bf16* out = nullptr;            // [num_rows, ffn]
  int64_t num_rows = 0, ffn = 0;
};
void run(const SiluMulParams& p, cudaStream_t stream);

// out = a + b elementwise, bf16 or fp32.
struct AddParams {
  const void* a = nullptr;  // [n]
  const void* b = nullptr;  // [n]
  void* out = nullptr;      // [n]
  int64_t n = 0;
  bool f32 = false;         // element type: fp32, else bf16
};
void run(const AddParams& p, cudaStream_t stream);

// Scatters each token's K and V rows into its cache slot (negative slot: skipped). Source rows may sit
// inside wider rows (a fused q/k/v projection): they start k_stride_bytes / v_stride_bytes apart.
struct KvWriteParams {
  const void* k = nullptr;               // [num_tokens, k_stride_bytes], of which the first k_row_bytes are copied
  const void* v = nullptr;               // [num_tokens, v_stride_bytes] or null
  const int32_t* slot_mapping = nullptr;  // [num_tokens]
  void* k_cache = nullptr;               // [num_slots, k_row_bytes]
  void* v_cache = nullptr;               // [num_slots, v_row_bytes]
  int64_t num_tokens = 0, num_slots = 0, k_row_bytes = 0, v_row_bytes = 0;
  int64_t k_stride_bytes = 0, v_stride_bytes = 0;
  // FP8 caches (else null): k and v are bf16 rows of num_heads x head_dim, the caches get e4m3 codes (row
  // bytes = num_heads * head_dim) and each (token, head) row's amax / 448 goes to its scale (WriteKvParams).
  float* k_scale = nullptr;              // [num_slots, num_heads]
  float* v_scale = nullptr;              // [num_slots, num_heads]
  int32_t num_heads = 0, head_dim = 0;
  // MLA's kv_a norm (WriteKvParams::k_norm_weight; no v): the first k_norm_features of each bf16 k row
  // RMS-normalised times this weight as it is written. num_heads and head_dim are set then.
  const bf16* k_norm_weight = nullptr;
  int32_t k_norm_features = 0;
  float k_norm_eps = 1e-6f;
};
void run(const KvWriteParams& p, cudaStream_t stream);
bool kv_write_wide(const KvWriteParams& p);  // whether rows can move in 16-byte units

// Rotary embedding, then the token's K and V rows into the cache (k of the rotary params is kv.k): one
// launch for the two.
void run(const RotaryParams& p, const KvWriteParams& kv, cudaStream_t stream);

// out = x @ w^T (+ bias): cuBLASLt, or a GEMV-like kernel when there are few rows (decode).
struct GemmParams {
  const bf16* x = nullptr;     // [m, k]
  const bf16* w = nullptr;     // [n, k] (Hugging Face Linear layout)
  const bf16* bias = nullptr;  // [n] or null
  void* out = nullptr;         // [m, n], bf16, or fp32 when out_f32 (logits); [m, n / 2] bf16 when swiglu
  int64_t m = 0, n = 0, k = 0;
  bool out_f32 = false;
  bool allow_gemv = true;      // may take the small-m kernel instead of cuBLASLt
  bool swiglu = false;         // w is [gate; up]: out = silu(x @ gate^T) * (x @ up^T) (GEMV path only)
  bool split_by_iterations = false;  // the GEMV's split rule (CudaOptions::gemv_split_by_iterations)
  bool stream_rows = false;    // the streaming GEMV where it applies (CudaOptions::gemv_stream)
  CublasLt* lt = nullptr;      // handle, workspace and plan cache
};
void run(const GemmParams& p, cudaStream_t stream);
bool gemv_supports(const GemmParams& p);  // whether run() takes the small-m kernel for these parameters
// The streaming GEMV (ops/gemv_stream.cu): needs gemv_supports(p) and !p.swiglu.
void run_gemv_stream(const GemmParams& p, cudaStream_t stream);

// out[:, i] = x[:, i] @ w[i]^T for each i < batch, one strided-batched cuBLASLt call.
struct BatchedGemmParams {
  const bf16* x = nullptr;  // [m, batch, k]
  const bf16* w = nullptr;  // [batch, n, k]
  bf16* out = nullptr;      // [m, batch, n]
  int64_t m = 0, n = 0, k = 0;
  int32_t batch = 0;
  CublasLt* lt = nullptr;
};
void run(const BatchedGemmParams& p, cudaStream_t stream);

// out[r] = [a[r], b[r]]: rows joined along the last dimension, as bytes.
struct ConcatParams {
  const void* a = nullptr;  // [num_rows, a_row_bytes]
  const void* b = nullptr;  // [num_rows, b_row_bytes]
  void* out = nullptr;      // [num_rows, a_row_bytes + b_row_bytes]
  int64_t num_rows = 0, a_row_bytes = 0, b_row_bytes = 0;
};
void run(const ConcatParams& p, cudaStream_t stream);

// The expert choice of MoeRouteParams (ops.h) for every token: one warp per token, experts in shared memory.
struct RouteParams {
  const float* logits = nullptr;           // [num_tokens, num_experts]
  const float* correction_bias = nullptr;  // [num_experts] or null
  int32_t* topk_ids = nullptr;             // [num_tokens, top_k]
  float* topk_weights = nullptr;           // [num_tokens, top_k]
  int64_t num_tokens = 0;
  int32_t num_experts = 0, top_k = 0;
  int32_t n_group = 1, topk_group = 1, group_score_top = 1;
  bool sigmoid = false;  // scoring: sigmoid, else softmax over all experts
  bool renormalize = false;
  float routed_scaling_factor = 1.0f;
};
void run(const RouteParams& p, cudaStream_t stream);
bool route_supports(int64_t num_experts, int64_t top_k, int64_t n_group);

// The all-reduce of a tensor-parallel layer's output over the GPUs of one process, for decode-sized steps
// (ops/peer_all_reduce.cu; NcclCommunicator's path): every rank writes its rows straight into each peer's
// inbox over NVLink, and an inbox element has arrived once it no longer reads as the empty pattern (every
// byte kPeerEmptyByte), so no flag or fence separates the data from its signal. With residual and weight
// the sum goes on into residual += sum, out = rms_norm(residual) * weight (add_rms_norm's arithmetic), all
// in the one kernel; without them x = sum. Every rank sums in rank order: the same bits everywhere.
inline constexpr int kMaxPeerRanks = 8;
inline constexpr int kPeerEmptyByte = 0x80;  // bf16 0x8080, -1.2e-38; a value with that pattern is sent as -0
struct PeerAllReduceParams {
  bf16* x = nullptr;              // [rows, hidden] this rank's partial sums; the sum without residual
  bf16* residual = nullptr;       // [rows, hidden] or null
  const bf16* weight = nullptr;   // [hidden], with residual
  bf16* out = nullptr;            // [rows, hidden], with residual
  int64_t rows = 0;
  int32_t hidden = 0;             // a multiple of 8, at most kPeerMaxHidden
  float eps = 1e-6f;
  void* inboxes[kMaxPeerRanks] = {};  // rank r's: [2 turns][world senders][inbox_bytes], empty between calls
  int64_t inbox_bytes = 0;            // rows * hidden * 2 at most
  uint32_t* turn = nullptr;           // this rank's call count (its parity picks the inboxes' half)
  uint32_t* arrived = nullptr;        // this rank's blocks done with the current call
  const volatile int* abort_flag = nullptr;  // host memory; nonzero ends every wait
  int32_t rank = 0, world = 0;
};
inline constexpr int kPeerMaxHidden = 16384;
void run(const PeerAllReduceParams& p, cudaStream_t stream);

// What a routed-experts launch needs besides its expert matrices (MoeExpertsParams in ops.h), either format.
struct MoeExpertsArgs {
  const bf16* x = nullptr;               // [num_tokens, hidden]
  const int32_t* topk_ids = nullptr;     // [num_tokens, top_k]
  const float* topk_weights = nullptr;   // [num_tokens, top_k]
  const bf16* gate_up_bias = nullptr;    // [num_experts, 2 * ffn] or null
  const bf16* down_bias = nullptr;       // [num_experts, hidden] or null
  bf16* out = nullptr;                   // [num_tokens, hidden]
  const bf16* add = nullptr;             // [num_tokens, hidden] or null: added into out by the combine
  void* workspace = nullptr;             // moe_workspace_bytes(num_tokens or more, ...)
  int64_t num_tokens = 0;
  int32_t hidden = 0, ffn = 0, num_experts = 0, top_k = 0;
  int32_t first_expert = 0;  // expert id of matrix 0; pairs outside [first_expert, + num_experts) are skipped
  bool interleaved = false;  // gate/up rows alternate (else the ffn gate rows, then the ffn up rows)
  float swiglu_limit = 0.0f, swiglu_alpha = 1.702f;
  // One token without grouping, its input row in shared memory (CudaOptions::moe_one_token_kernels).
  bool one_token_kernels = true;
  // One token's products on CTAs resident for all its choices' rows (CudaOptions::moe_one_token_stream), over
  // this many SMs; 0: a CTA per (choice, m-tile).
  int32_t one_token_stream_sms = 0;
  // Prefill-sized tiles on wgmma (CudaOptions::moe_wgmma), of 128 pairs where experts average many
  // (CudaOptions::moe_wgmma_wide).
  bool wgmma = false;
  bool wgmma_wide = false;
};
// Scratch of either format's launch for up to max_tokens tokens (ops/moe_workspace.h's layout).
size_t moe_workspace_bytes(int64_t max_tokens, int32_t hidden, int32_t ffn, int32_t num_experts, int32_t top_k);

// MoeExpertsParams with MXFP4 expert matrices (ops/moe_mma.cu): the token/expert pairs sorted by
// expert, per expert a gate/up product with its bias and activation and a down product with its bias (the
// codes decoded in registers and multiplied on tensor cores), then each token's weighted sum.
struct Mxfp4MoeParams : MoeExpertsArgs {
  const uint8_t* gate_up = nullptr;         // [num_experts, 2 * ffn, hidden / 2] E2M1 codes
  const uint8_t* gate_up_scales = nullptr;  // [num_experts, 2 * ffn, hidden / 32] E8M0
  const uint8_t* down = nullptr;            // [num_experts, hidden, ffn / 2]
  const uint8_t* down_scales = nullptr;     // [num_experts, hidden, ffn / 32]
};
void run(const Mxfp4MoeParams& p, cudaStream_t stream);
// Hidden and ffn multiples of kMoeWidthStep, at most 1024 experts.
constexpr int64_t kMoeWidthStep = 64;  // k values per step of the expert kernels
bool mxfp4_moe_supports(int64_t hidden, int64_t ffn, int64_t num_experts);

// MoeExpertsParams with bf16 expert matrices (DeepSeek; FP8 checkpoints are converted to bf16 at load)
// (ops/moe_bf16.cu): the pairs grouped by expert as for MXFP4, per tile of one expert's pairs a gate/up
// product with bias and activation and a down product with bias, then each token's weighted sum.
struct Bf16MoeParams : MoeExpertsArgs {
  const bf16* gate_up = nullptr;  // [num_experts, 2 * ffn, hidden]
  const bf16* down = nullptr;     // [num_experts, hidden, ffn]
};
void run(const Bf16MoeParams& p, cudaStream_t stream);
// Hidden and ffn multiples of 8 (16-byte rows), at most 1024 experts.
bool bf16_moe_supports(int64_t hidden, int64_t ffn, int64_t num_experts);
// The same on tensor cores (ops/moe_mma.cu, the MXFP4 kernels reading bf16 rows): hidden and ffn multiples
// of 64, at most 1024 experts.
void run_mma(const Bf16MoeParams& p, cudaStream_t stream);
bool bf16_moe_mma_supports(int64_t hidden, int64_t ffn, int64_t num_experts);

// Attention of new tokens over the paged KV cache (which already holds their K/V), with the key rules of
// PagedAttentionParams (ops.h): chains, draft trees (tree_mask) and block-table views (block_positions);
// kernels/attention_keys.cuh applies them.
struct AttentionParams {
  const bf16* q = nullptr;             // [num_tokens, q_row_stride]: num_heads rows of head_dim at the front
  const bf16* k_cache = nullptr;       // [num_blocks, block_size, num_kv_heads, head_dim]
  // [num_blocks, block_size, num_kv_heads, head_dim], or null: MLA's shared K=V latent (num_kv_heads 1),
  // V the first head_dim_v features of each k_cache row (run_mla_attention)
  const bf16* v_cache = nullptr;
  // An FP8 cache (GQA only: the decode and prefill kernels): k_cache8 / v_cache8 hold e4m3 codes in the
  // layout above and k_cache / v_cache are null; a value is code * its (token, kv head) row's scale.
  const uint8_t* k_cache8 = nullptr;   // [num_blocks, block_size, num_kv_heads, head_dim]
  const uint8_t* v_cache8 = nullptr;   // [num_blocks, block_size, num_kv_heads, head_dim]
  const float* k_scale = nullptr;      // [num_blocks, block_size, num_kv_heads]
  const float* v_scale = nullptr;      // [num_blocks, block_size, num_kv_heads]
  bf16* out = nullptr;                 // [num_tokens, num_heads, head_dim_v]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* q_positions = nullptr;   // [num_tokens] or null: chains ending at context_len - 1
  const uint32_t* tree_mask = nullptr;    // [num_tokens, mask_words] or null
  const int32_t* block_positions = nullptr;  // [num_seqs, max_blocks_per_seq] or null (no view)
  const int32_t* view_blocks = nullptr;      // [num_seqs], with block_positions
  const float* sinks = nullptr;        // [num_heads] or null: a logit per head that joins the softmax
  // [num_tokens, top_k] or null: DSA-lite's sparse attention, each query over exactly the cache positions
  // its row lists (-1: unused); context_lens, q_positions, tree_mask and views are then not read.
  const int32_t* selected = nullptr;
  int32_t top_k = 0;
  float* partial_out = nullptr;        // [num_tokens, num_heads, num_splits, head_dim_v] split-KV scratch
  float* partial_lse = nullptr;        // [num_tokens, num_heads, num_splits, 2] (max, sum) per split
  int32_t* split_counters = nullptr;   // [num_tokens, num_kv_heads], zero between launches, or null
  int64_t q_row_stride = 0;            // elements between consecutive tokens' q rows
  int32_t num_tokens = 0, num_seqs = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int32_t head_dim_v = 0;              // out's width: head_dim, or MLA's kv_lora_rank (< head_dim)
  int32_t block_size = 0, max_blocks_per_seq = 0;
  int32_t mask_words = 0;              // words per tree_mask row
  int32_t num_splits = 1;              // split-KV factor of the decode kernel
  // With it (decode kernels), each sequence uses only as many of the num_splits splits as decode_split_cost
  // picks for its own keys with the launch's CTAs over this many resident slots: num_splits is chosen from
  // the longest context the block table allows, up to twice the step's longest sequence in a graph bucket.
  int32_t split_slots = 0;
  // CTAs per (token, kv head) and split in the decode kernel on CUDA cores, each over group / head_slices of
  // the group's query heads (the same K/V read that many times, from L2): few pairs give the GPU few warps,
  // and a CTA's instructions per chunk grow with its heads.
  int32_t head_slices = 1;
  float scale = 1.0f;
  int32_t sliding_window = 0;
};
// Tensor-core flash attention over query tiles of every sequence in one launch (prefill, chunked
// prefill, prefix hits, mixed batches). Needs head_dim % 8 == 0 and head_dim <= 128.
void run_prefill_attention(const AttentionParams& p, cudaStream_t stream);
bool prefill_attention_supports(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);
// CTAs run_prefill_attention launches for these shapes.
int64_t prefill_attention_ctas(const AttentionParams& p);
// One query token per CTA and kv head (all heads of its group share each K/V read), the keys split into
// num_splits parts merged in the launch (split counters) or by a second kernel (flash decoding). Any
// number of new tokens per sequence; head_dim % 8 == 0 and head_dim <= 128. FP8 caches run on tensor cores
// (ops/decode_attention_fp8.cu) where `kernel` asks for them and decode_attention_fp8_supports(p), else on
// CUDA cores as bf16 caches do.
enum class DecodeKernel : uint8_t { kCudaCores, kTensorCores };
void run_decode_attention(const AttentionParams& p, DecodeKernel kernel, cudaStream_t stream);
bool decode_attention_supports(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);
// The FP8 tensor-core kernel: e4m3 caches (k_cache8), head_dim % 16 == 0 and <= 128, up to 8 query heads
// per kv head, chains, trees and views (not sparse lists).
bool decode_attention_fp8_supports(const AttentionParams& p);
void run_decode_attention_fp8(const AttentionParams& p, cudaStream_t stream);
int decode_attention_fp8_ctas_per_sm(int32_t head_dim);
// Multi-head latent attention (ops/mla_attention*.cu): v_cache null, one latent row per token (num_kv_heads
// 1), out of width head_dim_v. One CTA per (query token, group of up to mla_attention_heads_per_cta heads,
// key split), every latent row read once per CTA for all its heads; num_splits > 1 adds a merge kernel over
// partial_out / partial_lse. Any number of new tokens per sequence, every key rule. Three kernels compute
// it: on warpgroup MMA (mla_attention_wgmma.cu, bf16 latents) or mma.sync (mla_attention_mma.cu, CTAs of 16
// heads) where the shape allows, else on CUDA cores.
enum class MlaKernel : uint8_t { kCudaCores, kTensorCores, kWarpgroup };
constexpr int32_t kMlaMaxSplits = 256;  // the merge kernel weighs up to this many splits of a (token, head)
void run_mla_attention(const AttentionParams& p, MlaKernel kernel, cudaStream_t stream);
bool mla_attention_supports(int32_t head_dim, int32_t head_dim_v, int32_t num_kv_heads);
// Which kernels a caller allows; mla_attention_kernel picks the first allowed that fits the shape, in the
// order warpgroup, tensor cores, CUDA cores.
struct MlaKernelChoice {
  bool tensor_cores = true;  // mma.sync: head_dim % 16 == 0, head_dim_v 128/256/384/512, no sinks, q rows 16-byte aligned
  bool wgmma = false;        // warpgroup MMA: as tensor cores, bf16 latents, head_dim_v 128/384/512
};
MlaKernel mla_attention_kernel(const AttentionParams& p, const MlaKernelChoice& allowed);
int32_t mla_attention_heads_per_cta(MlaKernel kernel, int32_t num_heads);
int32_t mla_attention_ctas_per_sm(MlaKernel kernel);
// The mma.sync kernel.
bool mla_attention_mma_supports(int32_t head_dim, int32_t head_dim_v, bool sinks, bool fp8);
int32_t mla_attention_mma_heads_per_cta();
int32_t mla_attention_mma_ctas_per_sm();
void run_mla_attention_mma(const AttentionParams& p, cudaStream_t stream);
// The warpgroup kernel: one CTA of two warpgroups an SM, 16 heads a CTA at 16 heads or fewer, else 32.
bool mla_attention_wgmma_supports(int32_t head_dim, int32_t head_dim_v, bool sinks, bool fp8);
int32_t mla_attention_wgmma_heads_per_cta(int32_t num_heads);
void run_mla_attention_wgmma(const AttentionParams& p, cudaStream_t stream);
// MLA's expanded prefill (ops/mla_prefill.cu; ops.h: GatherContextParams, MlaPrefillParams). The gather
// packs every sequence's cached latent rows; the attention runs per (64 query tokens, head) over them.
struct GatherContextLaunch {
  const bf16* cache = nullptr;      // [num_blocks * block_size, width] bf16, or null with cache8
  const uint8_t* cache8 = nullptr;  // the same as e4m3 codes, with `scales`
  const float* scales = nullptr;    // [num_blocks * block_size]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  bf16* head = nullptr;             // [rows, split]
  bf16* tail = nullptr;             // [rows, width - split]
  int32_t* key_start = nullptr;     // [num_seqs + 1]
  int32_t num_seqs = 0, max_blocks = 0, block_size = 0, width = 0, split = 0;
  int64_t rows = 0;                 // the capacity of head and tail
};
void run(const GatherContextLaunch& p, cudaStream_t stream);

struct MlaPrefillLaunch {
  const bf16* q_nope = nullptr;  // [num_tokens, heads, nope]
  const bf16* q_rope = nullptr;  // [num_tokens, heads, rope]
  const bf16* kv = nullptr;      // [rows, heads, nope + v]
  const bf16* k_rope = nullptr;  // [rows, rope]
  const int32_t* query_start = nullptr, *key_start = nullptr;  // [num_seqs + 1] each
  bf16* out = nullptr;           // [num_tokens, heads, v]
  int32_t num_tokens = 0, num_seqs = 0, heads = 0, nope = 0, rope = 0, v = 0;
  float scale = 1.0f;
};
void run(const MlaPrefillLaunch& p, cudaStream_t stream);
bool mla_prefill_supports(int64_t nope, int64_t rope, int64_t v);

// CTAs of the decode kernel for this shape that fit on one SM at once (the occupancy API, cached).
int decode_attention_ctas_per_sm(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);
constexpr int32_t kDecodeMaxSplits = 64;  // the decode kernel's in-launch merge stages this many splits' weights

// What `splits` splits of `keys` keys cost the decode kernel, in keys, with `pairs` CTAs per split (tokens x
// kv heads x head slices): its waves of CTAs (pairs x splits over the `slots` resident at once) times each
// CTA's keys plus one 64-key chunk of fixed work. A whole number of waves matters: 512 CTAs on 396 slots (8B at 64 sequences) run as
// two waves, the second a third full, where three splits run four full ones of a third of the keys.
__host__ __device__ inline int32_t decode_split_cost(int32_t pairs, int32_t slots, int32_t keys, int32_t splits) {
  const int32_t waves = (pairs * splits + slots - 1) / slots;
  return waves * ((keys + splits - 1) / splits + 64);
}
// The count of 1..most that decode_split_cost ranks first, ties to fewer (less to merge). The decode kernels
// pick theirs for each sequence's own keys with the same ranking (kernels/decode_splits.cuh).
inline int32_t cheapest_decode_splits(int32_t pairs, int32_t slots, int32_t keys, int32_t most) {
  int32_t best = 1, best_cost = decode_split_cost(pairs, slots, keys, 1);
  for (int32_t s = 2; s <= most; ++s) {
    const int32_t cost = decode_split_cost(pairs, slots, keys, s);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}
// Sparse attention (DSA-lite; p.selected set) runs on the decode kernel for GQA caches and on the latent
// kernels for a shared latent: each CTA walks its split of a query's list instead of a range of slots.

// DSA-lite's lightning indexer (IndexerTopkParams in ops.h) for query rows [row_begin, row_begin +
// num_rows) (ops/indexer_topk.cu): a scoring kernel over many CTAs writes each (query, position) score as an
// ordered key, the position rule already applied (unseen: 0, sink and window: all ones), and counts the
// keys' top 12 bits per query; then a CTA per query finds the top_k-th key by radix select and writes the
// chosen positions ascending.
struct IndexerParams {
  const bf16* q = nullptr;               // [num_tokens, heads, dim]
  const bf16* head_weights = nullptr;    // [num_tokens, heads]
  const bf16* k_cache = nullptr;         // [num_blocks, block_size, dim]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* q_positions = nullptr;   // [num_tokens] chains' cache positions, or null (derived)
  const uint32_t* tree_mask = nullptr;    // [num_tokens, mask_words] or null
  int32_t* selected = nullptr;           // [num_tokens, top_k]
  uint32_t* keys = nullptr;              // [num_rows, keys_stride]: of row r, width keys then kIndexerBins counts
  int64_t keys_stride = 0;               // width + kIndexerBins
  int32_t num_tokens = 0, num_seqs = 0, heads = 0, dim = 0, block_size = 0, max_blocks_per_seq = 0;
  int32_t mask_words = 0, top_k = 0, sink_tokens = 0, local_window = 1;
  int32_t row_begin = 0, num_rows = 0;   // the query rows of this launch (num_rows <= the scratch's rows)
  int32_t width = 0;                     // positions a key row holds: longer contexts are cut there
};
constexpr int32_t kIndexerBins = 4096;   // histogram bins: the top 12 bits of a key
void run(const IndexerParams& p, int32_t num_sms, cudaStream_t stream);
// Indexer shapes the kernels take: dim a multiple of 8 up to 128, heads * dim up to 1024.
bool indexer_supports(int32_t heads, int32_t dim);

// SpecPV's block bounds (KeyBoundsParams in ops.h): block entries[i, 0]'s min and max over its first
// entries[i, 1] keys, per feature of a row.
struct KeyBoundsLaunch {
  const bf16* k_cache = nullptr;   // [num_blocks, block_size, row]
  bf16* key_min = nullptr;         // [num_blocks, row]
  bf16* key_max = nullptr;         // [num_blocks, row]
  const int32_t* entries = nullptr;  // [num_entries, 2]
  int32_t num_entries = 0, block_size = 0, row = 0;
};
void run(const KeyBoundsLaunch& p, cudaStream_t stream);

// SpecPV's block scores (BlockScoreParams in ops.h).
struct BlockScoreLaunch {
  const bf16* key_min = nullptr;   // [num_blocks, kv_heads, dim]
  const bf16* key_max = nullptr;
  const bf16* q = nullptr;         // [num_tokens, q_row_stride]: heads rows of dim at the front
  int64_t q_row_stride = 0;
  const int32_t* rows = nullptr;   // [num_segments, 2]
  const int32_t* blocks = nullptr;  // [num_segments, width]
  float* scores = nullptr;         // [num_segments, width]
  int32_t num_segments = 0, width = 0, heads = 0, kv_heads = 0, dim = 0;
  bool quest = false;
};
void run(const BlockScoreLaunch& p, cudaStream_t stream);

}  // namespace drift::backend::cuda
