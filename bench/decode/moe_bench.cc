// drift_bench_moe: GPT-OSS's routed experts alone (CudaOps::moe_experts over MXFP4 matrices as stored), at decode
// batch sizes (and prefill-sized ones: --batch 512 4096); at batch 1 under both kernel choices of the CUDA backend:
// one token read directly (a CTA per choice and m-tile, or streamed: CudaOptions::moe_one_token_stream) or
// grouped (CudaOptions::moe_one_token_kernels); where the pairs take prefill tiles
// (more than 12 an expert) on mma.sync, on wgmma (CudaOptions::moe_wgmma) and on wgmma 128 pairs wide
// (CudaOptions::moe_wgmma_wide). Each row: microseconds per
// layer (a CUDA graph of back-to-back calls over several layers' experts, so that launch costs are what a decode
// step's graph pays and the weights come from DRAM), the expert bytes the choices reach over that time against
// the copy bandwidth measured in the same run, the products' FLOPs over that time against the bf16 matrix rate
// (what bounds prefill-sized batches), and the relative difference of the output from the first choice's (the op
// tests hold each to the CPU oracle).
//
// Choices are drawn at random (top-4 distinct experts per token, as a router spreading load evenly would);
// codes are random bytes, scales 2^-7, biases random bf16.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/runtime/check.h"
#include "base/dtype.h"
#include "ceilings.h"

namespace drift::bench {
namespace {

struct MoeGeometry {
  const char* name;
  int64_t hidden, ffn, experts, top_k, layers;  // layers: copies of the experts the timed calls rotate over
};

constexpr MoeGeometry kGeometries[] = {{"gpt-oss-20b", 2880, 2880, 32, 4, 4}, {"gpt-oss-120b", 2880, 2880, 128, 4, 2}};

// One layer's experts on the GPU.
struct LayerExperts {
  backend::Buffer gate_up, gate_up_scales, down, down_scales, gate_up_bias, down_bias;
};

double expert_bytes(const MoeGeometry& g) {
  const double values = 3.0 * double(g.hidden) * double(g.ffn);
  return values / 2 + values / 32 + 2.0 * double(3 * g.ffn);  // codes, scales, biases (gate/up and down rows)
}

LayerExperts random_layer(backend::CudaOps& ops, const MoeGeometry& g, uint64_t seed) {
  const int64_t e = g.experts, h = g.hidden, f = g.ffn;
  LayerExperts l{ops.alloc(DType::kU8, {e, 2 * f, h / 2}), ops.alloc(DType::kU8, {e, 2 * f, h / 32}),
                 ops.alloc(DType::kU8, {e, h, f / 2}),     ops.alloc(DType::kU8, {e, h, f / 32}),
                 ops.alloc(DType::kBF16, {e, 2 * f}),      ops.alloc(DType::kBF16, {e, h})};
  // Random bf16 bit patterns are as good as random codes; scales of 2^-7 keep the outputs finite.
  for (const backend::Buffer* codes : {&l.gate_up, &l.down})
    fill_random_bf16(ops, Tensor(codes->view.data, DType::kBF16, {int64_t(codes->view.nbytes() / 2)}, Device::kCuda), seed++);
  for (const backend::Buffer* scales : {&l.gate_up_scales, &l.down_scales})
    DRIFT_CUDA_CHECK(cudaMemsetAsync(scales->view.data, 120, scales->view.nbytes(), ops.stream()));
  fill_random_bf16(ops, l.gate_up_bias.view, seed++);
  fill_random_bf16(ops, l.down_bias.view, seed++);
  return l;
}

// A layer's routing of `batch` tokens: top_k distinct experts each, weights summing to one.
struct Routing {
  backend::Buffer ids, weights;
  int64_t distinct = 0;  // experts reached
};

Routing random_routing(backend::CudaOps& ops, const MoeGeometry& g, int64_t batch, std::mt19937& rng) {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::set<int32_t> reached;
  std::vector<int32_t> order(static_cast<size_t>(g.experts));
  for (int64_t t = 0; t < batch; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t j = 0; j < g.top_k; ++j) {
      ids.push_back(order[size_t(j)]);
      weights.push_back(1.0f / float(g.top_k));
      reached.insert(order[size_t(j)]);
    }
  }
  Routing r{ops.alloc(DType::kI32, {batch, g.top_k}), ops.alloc(DType::kF32, {batch, g.top_k}), int64_t(reached.size())};
  ops.copy_from_host(r.ids.view, ids.data());
  ops.copy_from_host(r.weights.view, weights.data());
  return r;
}

// Median microseconds of one call, from a graph of `calls` calls that rotate over the layers.
double time_calls(backend::CudaOps& ops, const std::vector<backend::MoeExpertsParams>& layers, int calls) {
  return time_captured(ops.stream(), calls, [&](int i) { ops.moe_experts(layers[size_t(i) % layers.size()]); }) * 1e6;
}

struct KernelChoice {
  bool one_token, stream, wgmma, wide;
  const char* label;
};

constexpr KernelChoice kChoices[] = {{false, false, false, false, "grouped"},
                                     {true, false, false, false, "one token"},
                                     {true, true, false, false, "one token, streamed"},
                                     {false, false, true, false, "grouped, wgmma"},
                                     {false, false, true, true, "grouped, wgmma 128 pairs"}};

// The rows of one geometry and batch size.
std::string measure(backend::CudaOps& ops, const MoeGeometry& g, const std::vector<LayerExperts>& layers, int64_t batch,
                    const Ceilings& ceil, std::mt19937& rng) {
  const backend::MoeShape shape{.hidden = g.hidden, .ffn = g.ffn, .num_experts = g.experts, .top_k = g.top_k,
                                .clamped_swiglu = true, .mxfp4 = true};
  backend::Buffer x = ops.alloc(DType::kBF16, {batch, g.hidden}), out = ops.alloc(DType::kBF16, {batch, g.hidden});
  fill_random_bf16(ops, x.view, 11);
  backend::Buffer work = ops.alloc(DType::kU8, {int64_t(ops.moe_workspace_bytes(shape, batch))});
  std::vector<Routing> routing;
  std::vector<backend::MoeExpertsParams> params;
  double reached = 0;
  for (const LayerExperts& l : layers) {
    routing.push_back(random_routing(ops, g, batch, rng));
    reached += double(routing.back().distinct) / double(layers.size());
    backend::MoeExpertsParams p;
    p.x = x.view, p.topk_ids = routing.back().ids.view, p.topk_weights = routing.back().weights.view;
    p.w_gate_up = l.gate_up.view, p.w_gate_up_scales = l.gate_up_scales.view, p.b_gate_up = l.gate_up_bias.view;
    p.w_down = l.down.view, p.w_down_scales = l.down_scales.view, p.b_down = l.down_bias.view;
    p.out = out.view, p.workspace = work.view;
    p.gate_up_interleaved = true, p.swiglu_limit = 7.0f;
    params.push_back(p);
  }
  const double bytes = reached * expert_bytes(g) + 4.0 * double(batch * g.hidden);
  // Each token's top_k products: gate/up (2F x H) and down (H x F), a multiply-add each.
  const double flops = 2.0 * double(batch * g.top_k) * 3.0 * double(g.hidden) * double(g.ffn);
  std::string rows;
  std::vector<float> first;
  for (const KernelChoice& k : kChoices) {
    if (k.one_token && batch != 1) continue;
    if (k.wgmma && batch * g.top_k <= 12 * g.experts) continue;  // up to 12 pairs an expert: no prefill tiles
    ops.set_moe_one_token_kernels(k.one_token);
    ops.set_moe_one_token_stream(k.stream);
    ops.set_moe_wgmma(k.wgmma);
    ops.set_moe_wgmma_wide(k.wide);
    const double us = time_calls(ops, params, 48);
    ops.moe_experts(params[0]);
    const std::vector<float> got = read_bf16(ops, out.view);
    if (first.empty()) first = got;
    const double rate = bytes / (us * 1e-6), flop_rate = flops / (us * 1e-6);
    rows += fmt::format("| {} | {} | {} | {:.1f} | {:.1f} | {:.0f} | {:.0f}% | {:.1f} | {:.0f}% | {:.1e} |\n", g.name, batch,
                        k.label, reached, us, rate * 1e-9, 100.0 * rate / ceil.bandwidth, flop_rate * 1e-12,
                        100.0 * flop_rate / ceil.bf16_rate, relative_l2(got, first));
    std::printf("%s batch %lld %s: %.1f us (%.0f%% of copy, %.0f%% of the bf16 matrix rate)\n", g.name,
                static_cast<long long>(batch), k.label, us, 100.0 * rate / ceil.bandwidth, 100.0 * flop_rate / ceil.bf16_rate);
  }
  ops.set_moe_one_token_kernels(true);
  ops.set_moe_one_token_stream(backend::CudaOptions{}.moe_one_token_stream);
  ops.set_moe_wgmma(backend::CudaOptions{}.moe_wgmma);
  ops.set_moe_wgmma_wide(backend::CudaOptions{}.moe_wgmma_wide);
  return rows;
}

int run(int argc, char** argv) {
  CLI::App app{"GPT-OSS routed experts (MXFP4) alone at decode batch sizes"};
  std::vector<std::string> models{"gpt-oss-20b"};
  std::vector<int64_t> batches{1, 4, 16, 64};
  std::string markdown;
  app.add_option("--model", models, "expert shapes")->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b"}));
  app.add_option("--batch", batches, "tokens per call");
  app.add_option("--markdown", markdown, "write the table here too");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (backend::cuda_device_count() == 0) {
    std::fprintf(stderr, "drift_bench_moe: no CUDA device\n");
    return 1;
  }
  backend::CudaOps ops({});
  cudaDeviceProp prop{};
  DRIFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const Ceilings ceil = measure_ceilings(ops);
  std::mt19937 rng(5);
  std::string table = fmt::format(
      "GPU: {} | copy {:.2f} TB/s | bf16 GEMM {:.0f} TFLOP/s | MXFP4 experts, hidden 2880, width 2880, top-4; us per "
      "layer from a graph of 48 calls\n\n| model | batch | kernels | experts reached | us | GB/s | of copy bandwidth | "
      "TFLOP/s | of matrix rate | differs from the first by |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
      prop.name, ceil.bandwidth * 1e-12, ceil.bf16_rate * 1e-12);
  for (const MoeGeometry& g : kGeometries) {
    if (std::find(models.begin(), models.end(), g.name) == models.end()) continue;
    std::vector<LayerExperts> layers;
    for (int64_t l = 0; l < g.layers; ++l) layers.push_back(random_layer(ops, g, uint64_t(100 + 10 * l)));
    ops.synchronize();
    for (int64_t b : batches) table += measure(ops, g, layers, b, ceil, rng);
  }
  print_table(table, markdown);
  return 0;
}

}  // namespace
}  // namespace drift::bench

int main(int argc, char** argv) { return drift::bench::run(argc, argv); }
