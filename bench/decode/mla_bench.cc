// drift_bench_mla: MLA decode attention alone (CudaOps::paged_attention over a shared latent cache of
// kv_lora_rank 512 + rope 64, values the first 512), one query token per sequence, at the batch sizes and
// contexts of issue 13's kernel table, for 16 heads (DeepSeek-V2-Lite, Youtu) and 128 (DeepSeek-V3).
// --width and --dv take other latents: MLA-lite on the Llama-3.1-8B shape caches 384 latent values and
// 8 x 16 kept RoPE features (--width 512 --dv 384, 32 heads; issue 16). Each
// row: microseconds per call (CUDA events over a CUDA graph of calls rotating over block tables on disjoint
// parts of the pool, so that launches cost what a decode step's graph pays and the rows come from DRAM, not
// the L2; median of repeats), the latent bytes
// read over that time against the copy bandwidth measured in the same run, and the tensor-core kernel
// beside the CUDA-core one with the relative difference of their outputs (a check that both computed the
// same thing on these inputs; the op tests hold them to the CPU oracle), and the warpgroup-MMA kernel
// (CudaOptions::mla_wgmma; over an FP8 latent the column repeats the mma.sync kernel, which runs there).
//
// `--max-splits 16 64 256` repeats the rows under each cap on the key splits (CudaOptions::mla_max_splits),
// to see where the split rule should stop at batch 1.
//
// The cache is random bf16 (a 64 MiB random pattern tiled over it), or with --fp8 random e4m3 codes with a
// scale per row (--kv-cache-dtype fp8: half the bytes a row), the block tables a random permutation of the
// pool's blocks, as a long-running server's would be.
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
#include "base/dtype.h"
#include "ceilings.h"

namespace drift::bench {
namespace {

// What one cache row holds: `width` bf16 values, the first `dv` of them the values.
struct Geometry {
  int64_t width = 576, dv = 512;
  bool fp8 = false;  // e4m3 codes and a fp32 scale per row
  float scale = 1.0f / std::sqrt(192.0f);  // DeepSeek's 1 / sqrt(qk_nope + qk_rope)
};

struct MlaRow {
  int64_t heads, batch, context;
  double us_tensor_cores, us_cuda_cores, us_wgmma;
  double bytes;       // latent rows read, plus queries and outputs
  double difference;  // relative L2 between the two kernels' outputs
};

// A latent cache of `blocks` blocks, random bf16 everywhere, or random FP8 codes with their row scales.
struct LatentCache {
  backend::Buffer rows, scales;
};
LatentCache random_cache(backend::CudaOps& ops, const Geometry& g, int64_t blocks, int64_t block_size) {
  LatentCache c;
  c.rows = ops.alloc(g.fp8 ? DType::kF8E4M3 : DType::kBF16, {blocks, block_size, 1, g.width});
  if (!g.fp8) {
    fill_random_bf16(ops, c.rows.view, 5);
    return c;
  }
  fill_random_e4m3(c.rows.view, 5);
  c.scales = ops.alloc(DType::kF32, {blocks, block_size, 1});
  const std::vector<float> scales(size_t(blocks * block_size), 1.0f / 448.0f);
  ops.copy_from_host(c.scales.view, scales.data());
  return c;
}

MlaRow measure(backend::CudaOps& ops, const Geometry& g, const LatentCache& cache, int64_t block_size, int64_t heads,
               int64_t batch, int64_t context, std::mt19937& rng) {
  const int64_t pool = cache.rows.view.size(0), per_seq = (context + block_size - 1) / block_size;
  std::vector<int32_t> blocks(static_cast<size_t>(pool));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> starts(static_cast<size_t>(batch + 1)), lens(static_cast<size_t>(batch), int32_t(context));
  std::iota(starts.begin(), starts.end(), 0);
  backend::Buffer query_start = upload_i32(ops, starts, {batch + 1}), context_lens = upload_i32(ops, lens, {batch});
  backend::Buffer q = ops.alloc(DType::kBF16, {batch, heads, g.width}), out = ops.alloc(DType::kBF16, {batch, heads, g.dv});
  ops.copy_from_host(q.view, random_bf16(size_t(q.view.numel()), 9).data());

  // Up to kMaxLayers block tables over disjoint parts of the pool, the calls rotating over them: as in a
  // decode step, where each layer reads its own cache, the latent rows come from DRAM, not from the L2.
  constexpr int64_t kMaxLayers = 32;
  const int64_t layers = std::clamp<int64_t>(pool / (batch * per_seq), 1, kMaxLayers);
  std::vector<backend::Buffer> tables;
  std::vector<backend::PagedAttentionParams> params;
  for (int64_t l = 0; l < layers; ++l) {
    const auto first = blocks.begin() + l * batch * per_seq;
    tables.push_back(upload_i32(ops, std::vector<int32_t>(first, first + batch * per_seq), {batch, per_seq}));
    params.push_back({.q = q.view, .k_cache = cache.rows.view, .k_scale = cache.scales.view, .out = out.view,
                      .block_tables = tables.back().view, .query_start = query_start.view,
                      .context_lens = context_lens.view, .scale = g.scale});
  }
  const int calls = int(std::max<int64_t>(layers, 4));
  auto time_kernel = [&](bool tensor_cores, std::vector<float>& result, bool wgmma = false) {
    ops.set_mla_tensor_cores(tensor_cores);
    ops.set_mla_wgmma(wgmma);
    const double t = time_captured(ops.stream(), calls, [&](int i) { ops.paged_attention(params[size_t(i) % params.size()]); });
    ops.paged_attention(params[0]);
    result = read_bf16(ops, out.view);
    return t;
  };
  std::vector<float> tensor_out, cuda_out, wgmma_out;
  MlaRow r{heads, batch, context, 0, 0, 0, 0, 0};
  r.us_tensor_cores = time_kernel(true, tensor_out) * 1e6;
  r.us_cuda_cores = time_kernel(false, cuda_out) * 1e6;
  r.us_wgmma = time_kernel(true, wgmma_out, true) * 1e6;
  ops.set_mla_tensor_cores(true);
  ops.set_mla_wgmma(backend::CudaOptions{}.mla_wgmma);
  const double row_bytes = g.fp8 ? double(g.width + 4) : double(g.width * 2);
  r.bytes = double(batch) * double(context) * row_bytes + double(batch * heads) * (g.width + g.dv) * 2;
  r.difference = std::max(relative_l2(tensor_out, cuda_out), relative_l2(wgmma_out, cuda_out));
  return r;
}

// One table row (and a progress line): `cap` the split cap it ran under (0: the split rule's own).
std::string format_row(const MlaRow& r, int32_t cap, double copy_bandwidth) {
  const double bandwidth = r.bytes / (r.us_tensor_cores * 1e-6);
  const double wgmma_bandwidth = r.bytes / (r.us_wgmma * 1e-6);
  std::printf("heads %lld batch %lld context %lld splits cap %d: %.1f us (%.0f%% of copy), CUDA cores %.1f us, "
              "wgmma %.1f us (%.0f%%)\n",
              static_cast<long long>(r.heads), static_cast<long long>(r.batch), static_cast<long long>(r.context), cap,
              r.us_tensor_cores, 100.0 * bandwidth / copy_bandwidth, r.us_cuda_cores, r.us_wgmma,
              100.0 * wgmma_bandwidth / copy_bandwidth);
  std::fflush(stdout);
  return fmt::format("| {} | {} | {} | {} | {:.1f} | {:.0f} | {:.0f}% | {:.1f} | {:.2f}x | {:.1f} ({:.0f}%) | {:.1e} |\n",
                     r.heads, r.batch, r.context, cap > 0 ? fmt::format("{}", cap) : std::string("rule"),
                     r.us_tensor_cores, bandwidth * 1e-9, 100.0 * bandwidth / copy_bandwidth, r.us_cuda_cores,
                     r.us_cuda_cores / r.us_tensor_cores, r.us_wgmma, 100.0 * wgmma_bandwidth / copy_bandwidth,
                     r.difference);
}

int run(int argc, char** argv) {
  CLI::App app{"MLA decode attention over a paged latent cache: tensor-core and CUDA-core kernels"};
  std::vector<int64_t> heads{16, 128}, batches{1, 16, 64}, contexts{1024, 4096, 32768};
  std::vector<int32_t> split_caps{0};
  int64_t block_size = 64;
  Geometry geometry;
  std::string markdown;
  app.add_option("--heads", heads, "query heads");
  app.add_option("--batch", batches, "sequences, one query token each");
  app.add_option("--context", contexts, "tokens in each sequence's cache");
  app.add_option("--block-size", block_size, "tokens per KV block");
  app.add_option("--width", geometry.width, "values per latent row (DeepSeek: 512 + 64 rope)");
  app.add_option("--dv", geometry.dv, "the first values of a row that are V");
  app.add_option("--fp8", geometry.fp8, "an FP8 (e4m3) latent cache with a scale per row");
  app.add_option("--max-splits", split_caps, "rows again under each cap on the key splits (0: the split rule's own)");
  app.add_option("--markdown", markdown, "write the table here too");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach a log even if the run is cut short
  if (backend::cuda_device_count() == 0) {
    std::fprintf(stderr, "drift_bench_mla: no CUDA device\n");
    return 1;
  }
  backend::CudaOps ops({});
  cudaDeviceProp prop{};
  DRIFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const Ceilings ceil = measure_ceilings(ops);
  const int64_t max_rows = *std::max_element(batches.begin(), batches.end()) * *std::max_element(contexts.begin(), contexts.end());
  if (geometry.width != 576) geometry.scale = 1.0f / std::sqrt(128.0f);  // MLA-lite keeps the model's head_dim 128
  const LatentCache cache = random_cache(ops, geometry, (max_rows + block_size - 1) / block_size, block_size);
  std::mt19937 rng(3);
  std::string table = fmt::format(
      "GPU: {} | copy {:.2f} TB/s | latent rows of {} ({}), values the first {}, block size {}\n\n"
      "| heads | batch | context | splits cap | tensor cores us | GB/s | of copy bandwidth | CUDA cores us | speedup | "
      "wgmma us (of copy) | kernels differ by |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      prop.name, ceil.bandwidth * 1e-12, geometry.width, geometry.fp8 ? "fp8 + a scale per row" : "bf16", geometry.dv,
      block_size);
  for (int32_t cap : split_caps) {
    ops.set_mla_max_splits(cap);
    for (int64_t h : heads)
      for (int64_t b : batches)
        for (int64_t c : contexts)
          table += format_row(measure(ops, geometry, cache, block_size, h, b, c, rng), cap, ceil.bandwidth);
  }
  print_table(table, markdown);
  return 0;
}

}  // namespace
}  // namespace drift::bench

int main(int argc, char** argv) { return drift::bench::run(argc, argv); }
