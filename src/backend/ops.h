// Ops: the only seam between model code and hardware. Model code calls these and nothing else; each
// backend (cpu/ is the oracle, cuda/ the fast one) implements every op. Ops write into tensors they are
// given and never allocate or synchronise inside a forward (contract 11), so a step can be captured.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/comm/communicator.h"
#include "base/tensor.h"
#include "drift/status.h"

namespace drift::backend {

// Memory owned by a backend; `view` describes it. Shared so a model and its workspace can hold it.
struct Buffer {
  std::shared_ptr<void> memory;
  Tensor view;
};

// Rotary embedding over the first `rotary_dim` features of each head, from a precomputed table.
struct RopeParams {
  Tensor cos_sin;        // [max_positions, rotary_dim] fp32: rotary_dim/2 cos values then rotary_dim/2 sin values
  int32_t rotary_dim = 0;
  bool interleaved = false;  // pairs (2i, 2i+1) as GPT-J/DeepSeek; otherwise halves (i, i + rotary_dim/2) as Llama
  // Elements between the rows of consecutive tokens in q and in k; 0: packed (heads * head_dim). A fused
  // q/k/v projection leaves each token's q, k and v side by side in one row, and they are rotated in place.
  int64_t q_row_stride = 0, k_row_stride = 0;
};

// Attention of a step's new tokens over the paged KV cache (which already holds their own K/V).
//
// Which keys a query sees. A sequence's num_new new tokens sit at its last cache positions
// [context_len - num_new, context_len) ("the new tokens"); the positions before them are its context.
// - A chain (no tree mask): a query at position p sees cache positions (p - sliding_window, p] (all of
//   [0, p] without a window). Decode, prefill, chunked prefill and chain speculation are all this case.
// - A draft tree (tree_mask given): a query at position p (its RoPE position: the context length plus its
//   depth in the tree) sees the context positions its window allows, and among the new tokens only those
//   its mask row marks (ancestors and itself) and its window allows (a tree shallower than the window
//   keeps all of them). New tokens past the mask's 32 * mask_words bits are seen as in a chain, and a
//   chain's rows mark every earlier new token, so chains and a tree can share a step.
// - A view (block_positions given): the table lists a subset of the sequence's blocks (SpecPV's partial
//   KV), in ascending order; keys outside the listed blocks are not seen. Nothing is copied.
struct PagedAttentionParams {
  Tensor q;             // [num_tokens, num_heads, head_dim]
  Tensor k_cache;       // [num_blocks, block_size, num_kv_heads, head_dim]
  // [num_blocks, block_size, num_kv_heads, head_dim_v]; undefined for MLA's shared K=V latent, where V is
  // the first head_dim_v (= out.size(2)) features of each k_cache row (FlashMLA's dv).
  Tensor v_cache;
  // With an F8E4M3 cache (else undefined): fp32 scales, one per cached (token, kv head) row; a cached value
  // is f8e4m3_to_f32(code) * scale of its row (WriteKvParams). v_scale is undefined with the shared latent.
  Tensor k_scale;       // [num_blocks, block_size, num_kv_heads] fp32
  Tensor v_scale;       // [num_blocks, block_size, num_kv_heads] fp32
  Tensor out;           // [num_tokens, num_heads, head_dim_v]
  Tensor block_tables;  // [num_seqs, max_blocks_per_seq] int32; entry b holds positions [b*block_size, (b+1)*block_size)
  Tensor query_start;   // [num_seqs + 1] int32: new tokens of sequence s are rows [query_start[s], query_start[s+1])
  Tensor context_lens;  // [num_seqs] int32: tokens in KV after this step (the new tokens included)
  // [num_tokens] int32: each query's position. Undefined: the new tokens are a chain ending at context_len - 1.
  Tensor q_positions;
  // [num_tokens, mask_words] uint32 or undefined (chains): bit j (word j / 32, bit j % 32) of query t's row
  // marks new token j of t's sequence (row query_start[s] + j, cache position context_len - num_new + j).
  Tensor tree_mask;
  // With block_positions the table is a view: entry i of sequence s holds logical block block_positions[s, i]
  // (ascending), and only its first view_blocks[s] entries are read.
  Tensor block_positions;  // [num_seqs, max_blocks_per_seq] int32, or undefined
  Tensor view_blocks;      // [num_seqs] int32, with block_positions
  Tensor sinks;         // optional [num_heads] fp32: a learned logit per head that joins the softmax (GPT-OSS)
  float scale = 1.0f;
  int32_t sliding_window = 0;  // 0: full; else a query at p sees context keys (p - window, p]
  int64_t q_row_stride = 0;    // elements between consecutive tokens' q rows; 0: packed (num_heads * head_dim)
  // The most new tokens any one sequence has (host-side, like FlashAttention's max_seqlen_q): a backend may
  // pick its kernel by it. 0: unknown.
  int32_t max_query_len = 0;
};

// DSA-lite's lightning indexer (DeepSeek-V3.2): picks the cache positions each new token attends to. A
// query scores each cache position s it sees by I(s) = sum_j w[j] * relu(q[j] . k[s]). Which positions a
// query sees follows PagedAttentionParams' rule without a window: a chain query at cache position p sees
// [0, p]; with tree_mask, a query sees its sequence's context [0, context_len - num_new) and the new
// tokens its mask row marks (new tokens past 32 * mask_words bits as in a chain). Of the positions it
// sees (L, ascending), a query keeps, in ascending order: those below sink_tokens, the last local_window
// of L (for a chain, (p - local_window, p]), and the highest-scoring others (ties: the lower position)
// until top_k are chosen; a query that sees at most top_k positions keeps all of them. Positions are cache
// positions (a draft token's slot in its sequence), not RoPE positions; for chains they are the same.
struct IndexerTopkParams {
  Tensor q;             // [num_tokens, index_heads, index_dim]
  Tensor head_weights;  // [num_tokens, index_heads]: w, one weight per indexer head
  Tensor k_cache;       // [num_blocks, block_size, 1, index_dim]: one indexer key per token
  Tensor block_tables;  // [num_seqs, max_blocks_per_seq] int32 of the indexer's KV group
  Tensor query_start;   // [num_seqs + 1] int32
  Tensor context_lens;  // [num_seqs] int32
  Tensor q_positions;   // [num_tokens] int32: chains' cache positions (unused with tree_mask)
  Tensor tree_mask;     // [num_tokens, mask_words] uint32 as PagedAttentionParams', or undefined (chains)
  Tensor selected;      // out [num_tokens, top_k] int32: cache positions, ascending, then -1
  // [score_rows, max_context + kIndexerHistogramBins] uint32 backend scratch, allocated at load and zeroed
  // once: the CUDA backend keeps the ordered scores of up to score_rows queries at a time there with a
  // histogram per query, and leaves the histograms zero after each call; the CPU backend ignores it.
  // max_context bounds the positions a query may see (longer contexts are not scored).
  Tensor scratch;
  int32_t sink_tokens = 0, local_window = 1;
};
inline constexpr int64_t kIndexerHistogramBins = 4096;

// Attention of each new token over exactly the positions `selected` lists (IndexerTopkParams' output),
// read through the attention group's block table. K/V layouts as PagedAttentionParams (a shared K=V latent
// when v_cache is undefined).
struct SparseAttentionParams {
  Tensor q;             // [num_tokens, num_heads, head_dim]
  Tensor k_cache;       // [num_blocks, block_size, num_kv_heads, head_dim]
  Tensor v_cache;       // [num_blocks, block_size, num_kv_heads, head_dim_v], or undefined (shared latent)
  Tensor out;           // [num_tokens, num_heads, head_dim_v]
  Tensor block_tables;  // [num_seqs, max_blocks_per_seq] int32
  Tensor query_start;   // [num_seqs + 1] int32
  Tensor selected;      // [num_tokens, top_k] int32: positions, -1 unused
  float scale = 1.0f;
  int64_t q_row_stride = 0;  // 0: packed
};

// MLA's expanded (non-absorbed) prefill, in two ops. gather_context packs every sequence's cached rows
// [0, context_len), position order, one sequence after another: sequence s's row j goes to row
// key_start[s] + j, its first head.size(1) values into `head` and the rest into `tail` (an FP8 cache's rows
// dequantized as code * scale). The caller sizes head and tail for the step's total context.
struct GatherContextParams {
  Tensor k_cache;       // [num_blocks, block_size, 1, width]
  Tensor k_scale;       // [num_blocks, block_size, 1] fp32 with an F8E4M3 cache, else undefined
  Tensor block_tables;  // [num_seqs, max_blocks_per_seq] int32
  Tensor context_lens;  // [num_seqs] int32
  Tensor head;          // out [rows, split]: MLA's latent
  Tensor tail;          // out [rows, width - split]: its rotated rope key
  Tensor key_start;     // out [num_seqs + 1] int32: exclusive prefix sums of context_lens
};

// Causal attention per head over packed keys (MLA's expanded form): the query [q_nope | q_rope] against the
// keys [k_nope | k_rope] (k_rope shared by every head) with values v. Sequence s's keys are rows
// [key_start[s], key_start[s + 1]); its new tokens are the last query_start[s + 1] - query_start[s] of them,
// and new token i sees the keys up to its own.
struct MlaPrefillParams {
  Tensor q_nope;       // [num_tokens, heads, nope]
  Tensor q_rope;       // [num_tokens, heads, rope], rotated
  Tensor kv;           // [rows, heads, nope + v]: per head the key's nope part, then the value (kv_b_proj's rows)
  Tensor k_rope;       // [rows, rope], rotated
  Tensor query_start;  // [num_seqs + 1] int32
  Tensor key_start;    // [num_seqs + 1] int32
  Tensor out;          // [num_tokens, heads, v]
  float scale = 1.0f;
};

// SpecPV / Quest page-sparse attention (algorithms.md §2): per-block key bounds kept beside the paged cache
// and indexed by its physical block ids, and block scores against a sequence's queries. MLA passes its latent
// cache (one "KV head" of latent + rope features) and queries already in latent space, so q . row is the logit.
//
// key_bounds: for each entry i, block entries[i, 0]'s element-wise min and max over its first entries[i, 1]
// keys (1..block_size), per KV head and channel, recomputed whole (so a call after any write is exact).
struct KeyBoundsParams {
  Tensor k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  Tensor key_min;  // [num_blocks, num_kv_heads, head_dim], the cache's dtype (a min of its keys is exact in it)
  Tensor key_max;  // as key_min
  Tensor entries;  // [n, 2] int32: (physical block, tokens it holds)
};

enum class BlockScore : uint8_t {
  // Quest (§2.2): sum_c max(q_c * min_c, q_c * max_c), an upper bound on q . k for every key of the block,
  // reduced by max over the segment's (query, head) pairs of each KV head: a bound on every logit.
  kQuest,
  // SpecPV's reference code (§2.1): max(q . max, q . min), averaged over the segment's queries and the query
  // heads of each KV head group (its reduce_type "mean").
  kSpecPv,
};

// scores[s, b] = max(scores[s, b], max over KV heads of the score of block blocks[s, b] against query rows
// rows[s, 0] .. rows[s, 1] - 1); an entry whose block is negative is left as it is. Called once per layer
// (scores first set to -inf), it ranks blocks by the max over layers: a view is one table for every head
// and layer, so a block counts when any head wants it.
struct BlockScoreParams {
  Tensor key_min, key_max;   // [num_blocks, num_kv_heads, head_dim] (KeyBoundsParams)
  Tensor q;                  // [num_tokens, num_heads, head_dim], q_row_stride elements apart (0: packed)
  int64_t q_row_stride = 0;
  Tensor rows;               // [num_segments, 2] int32: each segment's query rows [begin, end), end > begin
  Tensor blocks;             // [num_segments, width] int32: physical blocks, -1 past a segment's last
  Tensor scores;             // [num_segments, width] fp32
  BlockScore form = BlockScore::kSpecPv;
};

// Writes k/v rows into the cache at slot_mapping[t] = block * block_size + offset (negative: skip).
// An F8E4M3 cache stores each (token, head) row r as e4m3 codes of r / s with s = amax(|r|) / 448 in fp32,
// rounded to nearest even (f32_row_to_f8e4m3 in base/dtype.h is the rule), and s in the scale tensor
// beside it: no calibration, and every row uses the whole e4m3 range. MLA's latent row [latent | rope key]
// shares one scale (measured: bits per byte of models/drift-mla-14m +0.06% against BF16 KV, so no
// per-group scales).
struct WriteKvParams {
  Tensor k;             // [T, Hk, D]; MLA passes its [T, 1, L + R] latent rows here
  Tensor v;             // [T, Hk, Dv], or undefined with v_cache (MLA's shared K=V latent)
  Tensor slot_mapping;  // [T] int32
  Tensor k_cache;       // [num_blocks, block_size, Hk, D]
  Tensor v_cache;       // [num_blocks, block_size, Hk, Dv] or undefined
  Tensor k_scale;       // [num_blocks, block_size, Hk] fp32 with an F8E4M3 cache, else undefined
  Tensor v_scale;       // [num_blocks, block_size, Hk] fp32 with an F8E4M3 v_cache, else undefined
  // Elements between consecutive tokens' rows of k and of v; 0: packed (a row is Hk * D). Rows of a fused
  // q/k/v projection output are read in place.
  int64_t k_row_stride = 0, v_row_stride = 0;
  // MLA's kv_a norm, fused into the write (no v): with a weight [M], the first M features of each k row are
  // RMS-normalised and scaled by it, as rms_norm would (its rounding included), the rest written as they
  // are: the latent and the roped key of kv_a_proj_with_mqa's row go into the cache in one pass.
  Tensor k_norm_weight;
  float k_norm_eps = 1e-6f;
};

// Top-k expert choice from router logits, in the variants DeepSeek-V2/V3 and GPT-OSS define:
//   scores = softmax(logits) or sigmoid(logits); choice = scores + correction_bias (when given);
//   with n_group > 1, only the topk_group groups whose best `group_score_top` choices sum highest compete;
//   the top_k experts by choice win; weights = their scores, renormalised to sum 1 if asked, times
//   routed_scaling_factor. GPT-OSS's "softmax over the top-k logits" is softmax scoring + renormalise.
struct MoeRouteParams;
// Aborts (a programmer error, as any op's bad shape) unless the rule can pick topk_ids.size(1) experts
// from logits.size(1): groups divide the experts, the kept groups hold top_k of them.
void check_moe_route(const MoeRouteParams& p);

struct MoeRouteParams {
  enum class Scoring : uint8_t { kSoftmax, kSigmoid };
  Tensor logits;           // [T, E] fp32
  Tensor correction_bias;  // optional [E] fp32 (DeepSeek-V3 e_score_correction_bias): steers choice, not weights
  Tensor topk_ids;         // out [T, top_k] int32
  Tensor topk_weights;     // out [T, top_k] fp32
  Scoring scoring = Scoring::kSoftmax;
  int32_t n_group = 1, topk_group = 1;
  int32_t group_score_top = 1;  // a group's score: sum of its best this-many choices (V2: 1 = max, V3: 2)
  bool renormalize = false;     // norm_topk_prob
  float routed_scaling_factor = 1.0f;
};

// Routed experts: out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]), where
// expert_e(x) = w_down[e - first_expert] @ act(w_gate_up[e - first_expert] @ x + ...) + ..., over the choices
// j whose expert the matrices hold (first_expert <= e < first_expert + w_gate_up.size(0)); the others add
// nothing (expert parallelism: a rank holds a range of the experts, and a token none of whose experts it
// holds gets a zero row).
// act: silu(gate) * up, or with swiglu_limit > 0 GPT-OSS's clamped form
// (up' + 1) * g * sigmoid(alpha * g), g = min(gate, limit), up' = clamp(up, -limit, limit).
//
// Expert matrices come in the compute dtype, or, where the backend reads_weight_format(kMxfp4), as stored
// in MXFP4: U8 codes [E, rows, cols / 2] (two E2M1 values a byte, the even column in the low nibble) with
// U8 E8M0 scales [E, rows, cols / 32] (weights/mxfp4.h).
struct MoeExpertsParams {
  Tensor x;             // [T, H]
  Tensor topk_ids;      // [T, top_k] int32
  Tensor topk_weights;  // [T, top_k] fp32
  int32_t first_expert = 0;  // the expert id of w_gate_up[0] (0 unless experts are placed across ranks)
  Tensor w_gate_up;     // [E, 2F, H]: the F gate rows, then the F up rows (or alternating, gate_up_interleaved)
  Tensor b_gate_up;     // optional [E, 2F], in the row order of w_gate_up
  Tensor w_down;        // [E, H, F]
  Tensor b_down;        // optional [E, H]
  Tensor w_gate_up_scales, w_down_scales;  // MXFP4 scales, with U8 w_gate_up / w_down; else undefined
  Tensor out;           // [T, H]
  // Optional [T, H]: added into out with the experts' weighted sum (DeepSeek's shared experts' output), so
  // that the sum needs no add of its own.
  Tensor add;
  // Backend scratch of moe_workspace_bytes() for at least T tokens (undefined where that is 0).
  Tensor workspace;
  // Rows 2j and 2j + 1 of w_gate_up (and b_gate_up) are gate j and up j, as GPT-OSS checkpoints store them.
  bool gate_up_interleaved = false;
  float swiglu_limit = 0.0f;
  float swiglu_alpha = 1.702f;
};

// What one attention layer asks of a backend, stated when a model loads (never during a step).
struct AttentionShape {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, head_dim_v = 0;
  bool shared_kv = false;      // MLA: one latent cache row per token, V its first head_dim_v features
  bool sinks = false;          // GPT-OSS's per-head sink logit
  int32_t sliding_window = 0;
  DType kv_dtype = DType::kBF16;
  int32_t sparse_top_k = 0;    // DSA-lite: attention over indexer_topk's positions (sparse_paged_attention)
  int64_t index_heads = 0, index_dim = 0;  // DSA-lite's indexer (IndexerTopkParams::q's last two sizes)
};

// What a mixture-of-experts layer asks of a backend.
struct MoeShape {
  int64_t hidden = 0, ffn = 0, num_experts = 0, top_k = 0;
  bool clamped_swiglu = false;  // GPT-OSS's activation
  bool mxfp4 = false;           // expert matrices kept in MXFP4 (reads_weight_format(kMxfp4) said yes)
};

// Weight formats a kernel may read as stored instead of the compute dtype (the loader asks).
enum class WeightFormat : uint8_t { kMxfp4, kFp8Block };

class Ops;
// Sets every byte of t (memory of `ops`) to zero through the host, 16 MiB at a time, and waits: load time
// only (caches and scratch that must read as zeros, not NaN, before any step writes them).
void zero_fill(Ops& ops, const Tensor& t);

// A point in the queued work the host can wait for: staged inputs in page-locked memory (alloc_host) are
// rewritten only after the copy that reads them has run. Synchronous backends' marks are always passed.
class QueueMark {
 public:
  virtual ~QueueMark() = default;
  virtual void record() {}  // marks the work queued so far
  virtual void wait() {}    // blocks the host until the last recorded mark's work has run
};

// Queued work recorded once and replayed many times (a CUDA graph): the runner's decode steps.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Queues the recorded work again on the stream it was recorded from, with the pointers it was given.
  virtual void replay() = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;

  // Memory. alloc() is for load time and step-buffer setup, never inside a forward.
  virtual Buffer alloc(DType dtype, std::initializer_list<int64_t> shape) = 0;
  // Host memory that step inputs are staged in (its view's device is kCpu): page-locked on CUDA, so a
  // copy_from_host from it is an asynchronous DMA. The host must not rewrite it before the copy has run.
  virtual Buffer alloc_host(DType dtype, std::initializer_list<int64_t> shape) { return alloc(dtype, shape); }
  virtual std::unique_ptr<QueueMark> make_mark() { return std::make_unique<QueueMark>(); }
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;  // nbytes of dst
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;
  // Waits for queued work (the host reads results after this).
  virtual void synchronize() = 0;
  // Memory still free for this backend's allocations (sizes the KV cache).
  virtual size_t free_memory_bytes() const = 0;

  // Step capture (contract 11). Between begin_capture() and end_capture() ops are recorded instead of
  // run; replaying the result reruns them on whatever the same buffers then hold. Only a backend whose
  // supports_capture() is true implements them.
  virtual bool supports_capture() const { return false; }
  virtual void begin_capture() { DRIFT_CHECK(false, "backend {} cannot capture work", name()); }
  virtual std::unique_ptr<CapturedWork> end_capture() {
    DRIFT_CHECK(false, "backend {} cannot capture work", name());
    return nullptr;
  }

  // The dtype weights and activations are kept in on this backend (fp32 on the CPU, bf16 on CUDA).
  virtual DType compute_dtype() const = 0;

  // What this backend can run, asked when a model loads so that an unsupported model, shape or dtype is
  // refused with a Status naming the missing piece instead of failing inside a step. The defaults say yes.
  virtual Status supports(const AttentionShape&) const { return Status::Ok(); }
  virtual Status supports(const MoeShape&) const { return Status::Ok(); }
  // Whether a kernel reads weights of this format as stored (else the loader converts them).
  virtual bool reads_weight_format(WeightFormat) const { return false; }
  // Scratch bytes moe_experts needs for up to max_tokens tokens (MoeExpertsParams::workspace), allocated
  // with the model's other step buffers.
  virtual size_t moe_workspace_bytes(const MoeShape&, int64_t max_tokens) const {
    (void)max_tokens;
    return 0;
  }
  // Expert widths (MoeShape::ffn) moe_experts takes in this format are multiples of this: the loader pads a
  // rank's share of a width split with zero columns up to it (MoeSpec::kernel_ffn).
  virtual int64_t moe_width_multiple(const MoeShape&) const { return 1; }

  // Tensor parallelism: this backend's place among the ranks that split a model (one thread per GPU of a
  // host; backend/comm/README.md). Without a communicator a backend is a group of one and the collectives
  // below are the identity. The communicator runs them on this backend's stream (contract 11).
  void set_communicator(std::unique_ptr<Communicator> comm) { comm_ = std::move(comm); }
  // Makes the calling thread's work go to this backend's device (a rank's thread calls it first).
  virtual void bind_thread() {}
  Communicator* communicator() const { return comm_.get(); }
  int32_t rank() const { return comm_ ? comm_->rank() : 0; }
  int32_t world_size() const { return comm_ ? comm_->world_size() : 1; }
  // x = the elementwise sum of x over every rank, in place (after a row-split linear).
  void all_reduce(const Tensor& x) {
    if (comm_) comm_->all_reduce_sum(x);
  }
  // out = every rank's x side by side along the last dimension, rank order: x [N, C], out [N, world * C]
  // (the logits columns of an LM head split by vocabulary).
  void all_gather(const Tensor& x, const Tensor& out) {
    if (comm_) {
      comm_->all_gather_columns(x, out);
    } else {
      copy(x, out);
    }
  }
  // x holds this rank's partial sums of a layer's output [N, H]: residual += the sum of x over every rank,
  // then out = rms_norm(residual) * w, as add_rms_norm (x is left undefined). One kernel where the
  // communicator fuses them (NCCL's, over peer memory, for decode-sized steps); one rank: add_rms_norm.
  void all_reduce_add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
    if (comm_ && comm_->all_reduce_add_rms_norm(residual, x, w, eps, out)) return;
    all_reduce(x);
    add_rms_norm(residual, x, w, eps, out);
  }
  // x = rank root's x on every rank (a step's inputs, made on rank 0).
  void broadcast(const Tensor& x, int32_t root) {
    if (comm_) comm_->broadcast(x, root);
  }

  // out[t] = table[ids[t]]. ids: [T] int32, table: [V, H], out: [T, H].
  virtual void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) = 0;
  // A rank's part of an embedding split by vocabulary: out[t] = table[ids[t] - first_id] for an id inside
  // [first_id, first_id + V), else a zero row; the all-reduce of every rank's part is the whole lookup.
  // ids: [T] int32, table: [V, H] (the rank's rows), out: [T, H].
  virtual void embedding_part(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out) = 0;
  // out = x / rms(x) * w over the last dimension. x, out: [N, H]; w: [H].
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) = 0;
  // residual += x; out = rms_norm(residual). The pre-norm transformer's residual stream in one pass.
  virtual void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, float eps, const Tensor& out) = 0;
  // out = x @ w^T (+ bias). x: [T, K], w: [N, K] (Hugging Face Linear layout), bias: [N] or undefined, out: [T, N].
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out) = 0;
  // Rotates q and k in place. q: [T, Hq, D], k: [T, Hk, D] (rows p.q_row_stride / p.k_row_stride apart),
  // positions: [T] int32.
  virtual void rope(const Tensor& q, const Tensor& k, const Tensor& positions, const RopeParams& p) = 0;
  // out = silu(gate) * up, gate_up: [T, 2F] (gate first), out: [T, F].
  virtual void silu_mul(const Tensor& gate_up, const Tensor& out) = 0;
  // out[i] = x[rows[i]]. x: [N, H], rows: [M] int32, out: [M, H].
  virtual void gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) = 0;
  // out[rows[i]] = x[i]. x: [M, H], rows: [M] int32 (distinct), out: [N, H]. Moves accepted draft KV
  // (gathered first, so the rows may overlap the ones read).
  virtual void scatter_rows(const Tensor& x, const Tensor& rows, const Tensor& out) = 0;
  // out = a + b, same shapes.
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // dst = src, the same number of bytes, on this backend's queue. The default goes through the host
  // (synchronising, so not capturable): a backend whose steps may use it overrides it.
  virtual void copy(const Tensor& src, const Tensor& dst);
  virtual void write_kv(const WriteKvParams& p) = 0;
  // write_kv of packed rows.
  void write_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                const Tensor& v_cache) {
    write_kv(WriteKvParams{.k = k, .v = v, .slot_mapping = slot_mapping, .k_cache = k_cache, .v_cache = v_cache});
  }
  virtual void paged_attention(const PagedAttentionParams& p) = 0;

  // DSA-lite (a backend that answers supports() for a sparse_top_k shape implements both).
  virtual void indexer_topk(const IndexerTopkParams&) { DRIFT_CHECK(false, "backend {} has no indexer_topk", name()); }
  virtual void sparse_paged_attention(const SparseAttentionParams&) {
    DRIFT_CHECK(false, "backend {} has no sparse_paged_attention", name());
  }

  // MLA's expanded prefill (GatherContextParams, MlaPrefillParams): a backend that answers true for a
  // head geometry implements both; MLA stays absorbed elsewhere.
  virtual bool supports_mla_prefill(int64_t /*nope*/, int64_t /*rope*/, int64_t /*v*/) const { return false; }
  virtual void gather_context(const GatherContextParams&) { DRIFT_CHECK(false, "backend {} has no gather_context", name()); }
  virtual void mla_prefill_attention(const MlaPrefillParams&) {
    DRIFT_CHECK(false, "backend {} has no mla_prefill_attention", name());
  }

  // SpecPV's block bounds and scores (KeyBoundsParams, BlockScoreParams).
  virtual void key_bounds(const KeyBoundsParams& p) = 0;
  virtual void score_blocks(const BlockScoreParams& p) = 0;

  // Fusions a backend may do in one pass; the defaults run the unfused ops, and a fused version must give
  // the same result as those (the same roundings), so models call these unconditionally.
  // rope(q, kv.k, positions, rope) then write_kv(kv): q and kv.k rotated in place, K and V into the cache.
  virtual void rope_write_kv(const Tensor& q, const Tensor& positions, const RopeParams& rotary, const WriteKvParams& kv) {
    rope(q, kv.k, positions, rotary);
    write_kv(kv);
  }
  // linear(x, w, bias, gate_up) then silu_mul(gate_up, act): a SwiGLU MLP's stacked [gate; up]
  // projection and its activation. gate_up: [T, 2F] scratch that a fused version may leave unwritten.
  virtual void linear_silu_mul(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& gate_up,
                               const Tensor& act) {
    linear(x, w, bias, gate_up);
    silu_mul(gate_up, act);
  }

  // out[r] = [a[r], b[r]]: rows joined along the last dimension. a: [N, A], b: [N, B], out: [N, A + B].
  // MLA builds its cache row [latent | rope key] and its absorbed query [q_latent | q_rope] with it.
  virtual void concat(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out[:, i] = x[:, i] @ w[i]^T, one matrix per index i of dimension 1 (MLA's per-head absorbed up-projections).
  // x: [T, B, K], w: [B, N, K], out: [T, B, N].
  virtual void batched_linear(const Tensor& x, const Tensor& w, const Tensor& out) = 0;
  virtual void moe_route(const MoeRouteParams& p) = 0;
  virtual void moe_experts(const MoeExpertsParams& p) = 0;

 private:
  std::unique_ptr<Communicator> comm_;  // null: a group of one
};

// The CPU reference backend (always built).
std::unique_ptr<Ops> make_cpu_ops();
// CPU backends of `world` tensor-parallel ranks, [rank], each with a communicator of one thread group
// (backend/comm/thread_group.h): the ranks are threads of this process.
std::vector<std::unique_ptr<Ops>> make_cpu_ranks(int32_t world);

}  // namespace drift::backend
