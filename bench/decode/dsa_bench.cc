// drift_bench_dsa: DSA-lite's decode attention on the CUDA backend against dense attention, at
// Llama-3.1-8B's shape (32 query heads over 8 kv heads, head_dim 128, bf16 caches) and the retrofit tool's
// indexer (4 heads x 32 features by default), one query token per sequence. Each (batch, context) row
// times, with CUDA events after warm-up (median of repeats over back-to-back calls): dense paged_attention
// (the existing split-KV kernel), indexer_topk, sparse_paged_attention over the indexer's choice, and
// indexer + sparse; each with the bytes it must move, those bytes over the copy bandwidth measured in the
// same run (the limit) and limit / time; then the speedup dense / (indexer + sparse). Issue 16's target:
// at least 5x at 32k.
//
// Bytes: dense reads every K and V row; the indexer reads every indexer key and writes then reads back a
// 4-byte score per position; sparse reads top_k K and V rows per sequence. Caches are random bf16, block
// tables a random permutation of the pool's blocks.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/runtime/check.h"
#include "ceilings.h"

namespace drift::bench {
namespace {

struct Shape {
  int64_t heads = 32, kv_heads = 8, head_dim = 128, block_size = 16;
  int64_t index_heads = 4, index_dim = 32;
  int32_t top_k = 2048, sinks = 4, window = 16;
  int64_t max_context = 0;  // the indexer scratch's positions (DsaScratch: the model's); 0: the context
};

struct Timing {
  double us = 0, bytes = 0;
};

// One step's tensors for `batch` sequences of `context` tokens each.
struct Step {
  backend::Buffer k_cache, v_cache, index_cache, q, out, index_q, index_w, tables, starts, lens, positions;
  backend::Buffer selected, scratch;
};

backend::Buffer random_bf16_buffer(backend::CudaOps& ops, std::initializer_list<int64_t> shape, uint64_t seed) {
  backend::Buffer b = ops.alloc(DType::kBF16, shape);
  fill_random_bf16(ops, b.view, seed);
  return b;
}

Step make_step(backend::CudaOps& ops, const Shape& s, int64_t batch, int64_t context, std::mt19937& rng) {
  const int64_t per_seq = (context + s.block_size - 1) / s.block_size, blocks = batch * per_seq;
  Step st;
  st.k_cache = random_bf16_buffer(ops, {blocks, s.block_size, s.kv_heads, s.head_dim}, 1);
  st.v_cache = random_bf16_buffer(ops, {blocks, s.block_size, s.kv_heads, s.head_dim}, 2);
  st.index_cache = random_bf16_buffer(ops, {blocks, s.block_size, 1, s.index_dim}, 3);
  st.q = random_bf16_buffer(ops, {batch, s.heads, s.head_dim}, 4);
  st.index_q = random_bf16_buffer(ops, {batch, s.index_heads, s.index_dim}, 5);
  st.index_w = random_bf16_buffer(ops, {batch, s.index_heads}, 6);
  st.out = ops.alloc(DType::kBF16, {batch, s.heads, s.head_dim});
  std::vector<int32_t> table(static_cast<size_t>(blocks)), starts(static_cast<size_t>(batch + 1));
  const std::vector<int32_t> lens(static_cast<size_t>(batch), int32_t(context));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::iota(starts.begin(), starts.end(), 0);
  st.tables = upload_i32(ops, table, {batch, per_seq});
  st.starts = upload_i32(ops, starts, {batch + 1});
  st.lens = upload_i32(ops, lens, {batch});
  st.positions = upload_i32(ops, std::vector<int32_t>(size_t(batch), int32_t(context - 1)), {batch});
  st.selected = ops.alloc(DType::kI32, {batch, s.top_k});
  // As DsaScratch allocates it: up to 64 queries' scores at once, zeroed.
  const int64_t width = std::max(s.max_context, context);
  st.scratch = ops.alloc(DType::kU32, {std::min<int64_t>(batch, 64), width + backend::kIndexerHistogramBins});
  DRIFT_CUDA_CHECK(cudaMemsetAsync(st.scratch.view.data, 0, st.scratch.view.nbytes(), ops.stream()));
  ops.synchronize();
  return st;
}

// Seconds per call of `op`, back-to-back calls timed with CUDA events after warm-up.
template <class F>
double per_call(backend::CudaOps& ops, F&& op) {
  constexpr int kCalls = 10;
  return time_on_stream(ops.stream(), 2, 9, [&] {
           for (int i = 0; i < kCalls; ++i) op();
         }) /
         kCalls;
}

struct Row {
  int64_t batch, context;
  Timing dense, indexer, sparse;
};

Row measure(backend::CudaOps& ops, const Shape& s, int64_t batch, int64_t context, std::mt19937& rng) {
  Step st = make_step(ops, s, batch, context, rng);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const backend::PagedAttentionParams dense{.q = st.q.view, .k_cache = st.k_cache.view, .v_cache = st.v_cache.view,
                                            .out = st.out.view, .block_tables = st.tables.view,
                                            .query_start = st.starts.view, .context_lens = st.lens.view, .scale = scale};
  const backend::IndexerTopkParams indexer{
      .q = st.index_q.view, .head_weights = st.index_w.view, .k_cache = st.index_cache.view,
      .block_tables = st.tables.view, .query_start = st.starts.view, .context_lens = st.lens.view,
      .q_positions = st.positions.view, .selected = st.selected.view, .scratch = st.scratch.view,
      .sink_tokens = s.sinks, .local_window = s.window};
  const backend::SparseAttentionParams sparse{.q = st.q.view, .k_cache = st.k_cache.view, .v_cache = st.v_cache.view,
                                              .out = st.out.view, .block_tables = st.tables.view,
                                              .query_start = st.starts.view, .selected = st.selected.view,
                                              .scale = scale};
  const double b = double(batch), kv_row = double(s.kv_heads * s.head_dim * 2) * 2;  // K and V bytes per token
  Row r{batch, context, {}, {}, {}};
  r.dense = {per_call(ops, [&] { ops.paged_attention(dense); }) * 1e6, b * double(context) * kv_row};
  r.indexer = {per_call(ops, [&] { ops.indexer_topk(indexer); }) * 1e6,
               b * double(context) * double(s.index_dim * 2 + 8)};
  r.sparse = {per_call(ops, [&] { ops.sparse_paged_attention(sparse); }) * 1e6,
              b * double(std::min<int64_t>(s.top_k, context)) * kv_row};
  return r;
}

std::string table_row(const char* what, int64_t batch, int64_t context, const Timing& t, double bandwidth) {
  const double limit_us = t.bytes / bandwidth * 1e6;
  return fmt::format("| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f}% |\n", batch, context, what, t.us,
                     t.bytes / 1e6, limit_us, 100.0 * limit_us / t.us);
}

int run(int argc, char** argv) {
  CLI::App app{"DSA-lite decode attention (indexer + sparse) against dense paged attention"};
  Shape s;
  std::vector<int64_t> batches{1, 64}, contexts{32768, 8192};
  std::string markdown;
  app.add_option("--batch", batches, "sequences per step, paired with --context");
  app.add_option("--context", contexts, "tokens in each sequence's cache, paired with --batch");
  app.add_option("--top-k", s.top_k, "positions each query attends to");
  app.add_option("--index-heads", s.index_heads, "indexer heads");
  app.add_option("--index-dim", s.index_dim, "indexer key features");
  app.add_option("--block-size", s.block_size, "tokens per KV block");
  app.add_option("--max-context", s.max_context, "positions the indexer's scratch holds (as a model's, e.g. 131072)");
  app.add_option("--markdown", markdown, "write the table here too");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!batches_pair_with_contexts_on_a_gpu("drift_bench_dsa", batches.size(), contexts.size())) return 1;
  backend::CudaOps ops({});
  cudaDeviceProp prop{};
  DRIFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const Ceilings ceil = measure_ceilings(ops);
  std::mt19937 rng(7);
  std::string table = fmt::format(
      "GPU: {} | copy {:.2f} TB/s | {} heads over {} kv heads x {} (bf16), block {} | indexer {} x {}, top_k {}, "
      "scratch positions {} (0: the context)\n\n"
      "| batch | context | kernel | us | MB moved | limit us | limit / time |\n|---:|---:|---|---:|---:|---:|---:|\n",
      prop.name, ceil.bandwidth * 1e-12, s.heads, s.kv_heads, s.head_dim, s.block_size, s.index_heads, s.index_dim,
      s.top_k, s.max_context);
  std::string speedups;
  for (size_t i = 0; i < batches.size(); ++i) {
    const Row r = measure(ops, s, batches[i], contexts[i], rng);
    const Timing both{r.indexer.us + r.sparse.us, r.indexer.bytes + r.sparse.bytes};
    table += table_row("dense", r.batch, r.context, r.dense, ceil.bandwidth);
    table += table_row("indexer", r.batch, r.context, r.indexer, ceil.bandwidth);
    table += table_row("sparse", r.batch, r.context, r.sparse, ceil.bandwidth);
    table += table_row("indexer + sparse", r.batch, r.context, both, ceil.bandwidth);
    speedups += fmt::format("batch {} x context {}: dense / (indexer + sparse) = {:.2f}x\n", r.batch, r.context,
                            r.dense.us / both.us);
    std::printf("batch %lld context %lld: dense %.1f us, indexer %.1f us, sparse %.1f us\n",
                static_cast<long long>(r.batch), static_cast<long long>(r.context), r.dense.us, r.indexer.us,
                r.sparse.us);
  }
  table += "\n" + speedups;
  print_table(table, markdown);
  return 0;
}

}  // namespace
}  // namespace drift::bench

int main(int argc, char** argv) { return drift::bench::run(argc, argv); }
