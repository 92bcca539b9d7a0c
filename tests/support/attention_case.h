// A paged-attention step described by what it means (sequences with chains, draft trees given by parent
// links, block-table views given by the logical blocks they list) and built into the inputs the op takes
// (scattered blocks, packed tree masks, compacted view tables), with a brute-force reference computed
// from the description alone. Cache slots no query may read hold NaN, so reading one shows up.
// Shared by the CPU rule tests (tests/unit/attention) and the CUDA-vs-CPU tests (tests/ops).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"

namespace drift::testing {

struct KeySeq {
  int32_t context_len = 0;       // tokens in KV after the step
  int32_t num_new = 0;           // the last num_new of them are this step's queries
  std::vector<int32_t> parents;  // a draft tree: each new token's parent among the new tokens (-1: the root's
                                 // parent is the last context token); empty: a chain
  std::vector<int32_t> view;     // logical blocks an attention view lists (ascending); empty: every block
};

struct KeyCase {
  std::string name;
  int64_t head_dim = 64, num_heads = 8, num_kv_heads = 2, block_size = 16;
  std::vector<KeySeq> seqs;
  int32_t sliding_window = 0;
  bool sinks = false;
  bool explicit_positions = true;  // pass q_positions (always for trees)
};

// The op's inputs, on the host. Shapes as PagedAttentionParams documents them.
struct KeyInputs {
  int64_t num_tokens = 0, num_seqs = 0, num_blocks = 0, width = 0, mask_words = 0;
  std::vector<float> q, k_cache, v_cache, sinks;       // q: [T, H, D]; caches: [blocks, bs, Hk, D]; sinks: [H]
  std::vector<int32_t> block_tables, query_start, context_lens, q_positions;
  std::vector<uint32_t> tree_mask;                     // [T, mask_words], empty without trees
  std::vector<int32_t> block_positions, view_blocks;   // empty without views
  float scale = 1.0f;
  std::vector<std::vector<int32_t>> full_tables;       // every logical block of each sequence (the reference's)
};

// n values drawn from Normal(0, stddev) and rounded to bf16, so a bf16 backend sees exactly the same values.
std::vector<float> normal_values(size_t n, float stddev, std::mt19937_64& rng);
// A random draft tree of n tokens (each parent earlier than its child), from `seed`.
std::vector<int32_t> random_tree(int32_t n, uint64_t seed);
// The cases both test files run: chains with explicit positions, trees of one and two mask words mixed
// with chains, windows and sinks, views for decode, chains and trees.
std::vector<KeyCase> key_cases();

KeyInputs build_inputs(const KeyCase& c, std::mt19937_64& rng);

// An F8E4M3 cache built from fp32 rows of `row` values the way write_kv stores them (f32_row_to_f8e4m3).
// A row holding a NaN (a slot no query may read) gets a NaN scale, so reading it still shows up.
struct Fp8Cache {
  std::vector<uint8_t> codes;  // [rows * row]
  std::vector<float> scales;   // [rows]
  // code * scale of every value: the fp32 cache that holds exactly what this one means.
  std::vector<float> dequantized(int64_t row) const;
};
Fp8Cache quantize_fp8_cache(const std::vector<float>& cache, int64_t row);

// The inputs placed on a backend (each test uploads them its own way: fp32 on the CPU, bf16 on the GPU).
struct KeyBuffers {
  backend::Buffer q, k_cache, v_cache, out, block_tables, query_start, context_lens, q_positions, tree_mask,
      block_positions, view_blocks, sinks;
  backend::Buffer k_scale, v_scale;  // [blocks, bs, Hk] fp32 with an F8E4M3 cache, else empty
  // The op's parameters: optional inputs only where the case uses them.
  backend::PagedAttentionParams params(const KeyCase& c, const KeyInputs& in) const;
};
// The inputs placed on a backend through `floats(values, shape)` (q and the caches: bf16 on the GPU, fp32 on
// the CPU) and `ints(values, shape)`, optional ones only where the case has them. Sinks and out are the
// caller's (their dtype and out's width are the test's choice).
template <class Floats, class Ints>
KeyBuffers upload_key_inputs(const KeyCase& c, const KeyInputs& in, Floats&& floats, Ints&& ints) {
  const int64_t t = in.num_tokens, d = c.head_dim, hk = c.num_kv_heads;
  KeyBuffers b;
  b.q = floats(in.q, {t, c.num_heads, d});
  b.k_cache = floats(in.k_cache, {in.num_blocks, c.block_size, hk, d});
  b.v_cache = floats(in.v_cache, {in.num_blocks, c.block_size, hk, d});
  b.block_tables = ints(in.block_tables, {in.num_seqs, in.width});
  b.query_start = ints(in.query_start, {in.num_seqs + 1});
  b.context_lens = ints(in.context_lens, {in.num_seqs});
  b.q_positions = ints(in.q_positions, {t});
  if (in.mask_words > 0) {
    b.tree_mask = ints(std::vector<int32_t>(in.tree_mask.begin(), in.tree_mask.end()), {t, in.mask_words});
    b.tree_mask.view.dtype = DType::kU32;
  }
  if (!in.view_blocks.empty()) {
    b.block_positions = ints(in.block_positions, {in.num_seqs, in.width});
    b.view_blocks = ints(in.view_blocks, {in.num_seqs});
  }
  return b;
}

// A case whose cache holds only the `listed` logical blocks (ascending) of `c`'s single sequence, copied
// into a plain table, with the same queries and sinks: what attention over a view of those blocks must
// equal. The last listed block must be the sequence's last and the others full, so positions compact.
std::pair<KeyCase, KeyInputs> copy_of_blocks(const KeyCase& c, const KeyInputs& in, const std::vector<int32_t>& listed);
// The CPU backend's paged attention on the case's inputs: out [T, H, D], the caches stored as
// `cache_dtype` (F32 or BF16; the values are bf16-exact, so both hold the same numbers; or F8E4M3 with
// per-row scales, quantize_fp8_cache).
std::vector<float> run_cpu_attention(const KeyCase& c, const KeyInputs& in, DType cache_dtype = DType::kF32);
// out [T, H, D] from the description: keys by the rules (window, tree ancestors, view), exact softmax.
std::vector<float> reference_attention(const KeyCase& c, const KeyInputs& in);

}  // namespace drift::testing
