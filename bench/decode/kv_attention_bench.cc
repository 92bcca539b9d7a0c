// drift_bench_kv_attention: decode attention alone over bf16 and FP8 (e4m3 + a scale per token and kv
// head) KV caches on the CUDA backend, at Llama-3.1-8B's shape by default (32 query heads over 8 kv heads,
// head_dim 128, block 16), one query token per sequence. Each (batch, context) row times, with CUDA events
// after warm-up (median of repeats over back-to-back calls): the bf16 kernel, the FP8 CUDA-core kernel and
// the FP8 tensor-core kernel; each with the bytes it must read (every K and V row, and FP8's two scales),
// those bytes over the copy bandwidth measured in the same run (the limit) and limit / time. Issue 17's
// target is a whole decode step (8B x 64 x 4k) 1.3x faster with FP8 KV than with bf16; this table is where
// the attention's share of it shows. The two FP8 kernels' outputs are compared (relative L2) as a check.
// `--max-splits 1 4 16` repeats the bf16 row under each cap on the key splits (where the split rule should stop);
// the bf16 kernel also runs with CudaOptions::decode_head_slices switched (several CTAs per (token, kv head)
// at few pairs, each over a slice of the group's heads).
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
};

// One step's tensors for `batch` sequences of `context` tokens each, bf16 and FP8 caches side by side.
struct Step {
  backend::Buffer k16, v16, k8, v8, k_scale, v_scale, q, out, tables, starts, lens;
};

Step make_step(backend::CudaOps& ops, const Shape& s, int64_t batch, int64_t context, std::mt19937& rng) {
  const int64_t per_seq = (context + s.block_size - 1) / s.block_size, blocks = batch * per_seq;
  Step st;
  st.k16 = ops.alloc(DType::kBF16, {blocks, s.block_size, s.kv_heads, s.head_dim});
  st.v16 = ops.alloc(DType::kBF16, {blocks, s.block_size, s.kv_heads, s.head_dim});
  fill_random_bf16(ops, st.k16.view, 1);
  fill_random_bf16(ops, st.v16.view, 2);
  st.k8 = ops.alloc(DType::kF8E4M3, {blocks, s.block_size, s.kv_heads, s.head_dim});
  st.v8 = ops.alloc(DType::kF8E4M3, {blocks, s.block_size, s.kv_heads, s.head_dim});
  fill_random_e4m3(st.k8.view, 3);
  fill_random_e4m3(st.v8.view, 4);
  const std::vector<float> scales(size_t(blocks * s.block_size * s.kv_heads), 1.0f / 448.0f);
  st.k_scale = ops.alloc(DType::kF32, {blocks, s.block_size, s.kv_heads});
  st.v_scale = ops.alloc(DType::kF32, {blocks, s.block_size, s.kv_heads});
  ops.copy_from_host(st.k_scale.view, scales.data());
  ops.copy_from_host(st.v_scale.view, scales.data());
  st.q = ops.alloc(DType::kBF16, {batch, s.heads, s.head_dim});
  fill_random_bf16(ops, st.q.view, 5);
  st.out = ops.alloc(DType::kBF16, {batch, s.heads, s.head_dim});
  std::vector<int32_t> table(static_cast<size_t>(blocks)), starts(static_cast<size_t>(batch + 1));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::iota(starts.begin(), starts.end(), 0);
  st.tables = upload_i32(ops, table, {batch, per_seq});
  st.starts = upload_i32(ops, starts, {batch + 1});
  st.lens = upload_i32(ops, std::vector<int32_t>(size_t(batch), int32_t(context)), {batch});
  ops.synchronize();
  return st;
}

template <class F>
double per_call_us(backend::CudaOps& ops, F&& op) {
  constexpr int kCalls = 10;
  return time_on_stream(ops.stream(), 2, 9, [&] {
           for (int i = 0; i < kCalls; ++i) op();
         }) /
         kCalls * 1e6;
}

struct Row {
  int64_t batch = 0, context = 0;
  double bf16_us = 0, fp8_cuda_us = 0, fp8_tensor_us = 0, bf16_bytes = 0, fp8_bytes = 0, fp8_kernels_l2 = 0;
  double other_slices_us = 0;     // bf16 with CudaOptions::decode_head_slices switched
  std::vector<double> capped_us;  // bf16 under each --max-splits cap
};

Row measure(backend::CudaOps& ops, const Shape& s, int64_t batch, int64_t context, const std::vector<int>& caps,
            std::mt19937& rng) {
  Step st = make_step(ops, s, batch, context, rng);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  backend::PagedAttentionParams p{.q = st.q.view, .k_cache = st.k16.view, .v_cache = st.v16.view, .out = st.out.view,
                                  .block_tables = st.tables.view, .query_start = st.starts.view,
                                  .context_lens = st.lens.view, .scale = scale};
  Row r{batch, context};
  const double rows = double(batch) * double(context) * double(s.kv_heads);
  r.bf16_bytes = rows * double(s.head_dim * 2) * 2;
  r.fp8_bytes = rows * double(s.head_dim + 4) * 2;
  r.bf16_us = per_call_us(ops, [&] { ops.paged_attention(p); });
  ops.set_decode_head_slices(!backend::CudaOptions{}.decode_head_slices);
  r.other_slices_us = per_call_us(ops, [&] { ops.paged_attention(p); });
  ops.set_decode_head_slices(backend::CudaOptions{}.decode_head_slices);
  for (int cap : caps) {
    ops.set_decode_max_splits(cap);
    r.capped_us.push_back(per_call_us(ops, [&] { ops.paged_attention(p); }));
  }
  ops.set_decode_max_splits(backend::CudaOptions{}.decode_max_splits);
  p.k_cache = st.k8.view;
  p.v_cache = st.v8.view;
  p.k_scale = st.k_scale.view;
  p.v_scale = st.v_scale.view;
  ops.set_fp8_tensor_cores(false);
  r.fp8_cuda_us = per_call_us(ops, [&] { ops.paged_attention(p); });
  const std::vector<float> cuda_cores = read_bf16(ops, st.out.view);
  ops.set_fp8_tensor_cores(true);
  r.fp8_tensor_us = per_call_us(ops, [&] { ops.paged_attention(p); });
  r.fp8_kernels_l2 = relative_l2(read_bf16(ops, st.out.view), cuda_cores);
  return r;
}

std::string table_row(const Row& r, const char* what, double us, double bytes, double bandwidth, double bf16_us) {
  const double limit_us = bytes / bandwidth * 1e6;
  return fmt::format("| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f}% | {:.2f}x |\n", r.batch, r.context, what, us,
                     bytes / 1e6, limit_us, 100.0 * limit_us / us, bf16_us / us);
}

int run(int argc, char** argv) {
  CLI::App app{"Decode attention over bf16 and FP8 KV caches"};
  Shape s;
  std::vector<int64_t> batches{64, 64, 16, 1, 1}, contexts{4096, 8192, 4096, 4096, 32768};
  std::string markdown;
  std::vector<int> caps;
  app.add_option("--batch", batches, "sequences per step, paired with --context");
  app.add_option("--context", contexts, "tokens in each sequence's cache, paired with --batch");
  app.add_option("--heads", s.heads, "query heads");
  app.add_option("--kv-heads", s.kv_heads, "kv heads");
  app.add_option("--head-dim", s.head_dim, "dimensions per head");
  app.add_option("--block-size", s.block_size, "tokens per KV block");
  app.add_option("--max-splits", caps, "bf16 rows again under each cap on the key splits (CudaOptions::decode_max_splits)");
  app.add_option("--markdown", markdown, "write the table here too");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!batches_pair_with_contexts_on_a_gpu("drift_bench_kv_attention", batches.size(), contexts.size())) return 1;
  backend::CudaOps ops({});
  cudaDeviceProp prop{};
  DRIFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const Ceilings ceil = measure_ceilings(ops);
  std::mt19937 rng(7);
  std::string table = fmt::format(
      "GPU: {} | copy {:.2f} TB/s | {} heads over {} kv heads x {}, block {}\n\n"
      "| batch | context | KV, kernel | us | MB read | limit us | limit / time | vs bf16 |\n"
      "|---:|---:|---|---:|---:|---:|---:|---:|\n",
      prop.name, ceil.bandwidth * 1e-12, s.heads, s.kv_heads, s.head_dim, s.block_size);
  std::string checks;
  for (size_t i = 0; i < batches.size(); ++i) {
    const Row r = measure(ops, s, batches[i], contexts[i], caps, rng);
    table += table_row(r, "bf16", r.bf16_us, r.bf16_bytes, ceil.bandwidth, r.bf16_us);
    const std::string switched =
        fmt::format("bf16, head slices {}", backend::CudaOptions{}.decode_head_slices ? "off" : "on");
    table += table_row(r, switched.c_str(), r.other_slices_us, r.bf16_bytes, ceil.bandwidth, r.bf16_us);
    for (size_t c = 0; c < caps.size(); ++c)
      table += table_row(r, fmt::format("bf16, at most {} splits", caps[c]).c_str(), r.capped_us[c], r.bf16_bytes,
                         ceil.bandwidth, r.bf16_us);
    table += table_row(r, "fp8, CUDA cores", r.fp8_cuda_us, r.fp8_bytes, ceil.bandwidth, r.bf16_us);
    table += table_row(r, "fp8, tensor cores", r.fp8_tensor_us, r.fp8_bytes, ceil.bandwidth, r.bf16_us);
    checks += fmt::format("batch {} x context {}: the FP8 kernels' outputs differ by {:.2e} (relative L2)\n", r.batch,
                          r.context, r.fp8_kernels_l2);
    std::printf("batch %lld context %lld: bf16 %.1f us, fp8 CUDA cores %.1f us, fp8 tensor cores %.1f us\n",
                static_cast<long long>(r.batch), static_cast<long long>(r.context), r.bf16_us, r.fp8_cuda_us,
                r.fp8_tensor_us);
  }
  table += "\n" + checks;
  print_table(table, markdown);
  return 0;
}

}  // namespace
}  // namespace drift::bench

int main(int argc, char** argv) { return drift::bench::run(argc, argv); }
