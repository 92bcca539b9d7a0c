// drift_bench_decode: Llama-, GPT-OSS-, DeepSeek- and Youtu-shaped random-weight models on the CUDA backend,
// driven through ModelRunner the way the engine drives them (ModelRunner::step_and_sample: inputs packed
// into one upload, decode steps replayed from CUDA graphs, greedy sampling on the GPU, token ids back to
// the host): batch-1 decode (prompt 512, 128 generated), batched decode at 16 and 64 sequences, prefill of
// 512 and 4096 tokens. Each figure is printed next to its physical limit on this GPU: bytes a step must
// move over the measured copy bandwidth (decode), FLOPs over the measured bf16 matrix rate (prefill),
// whichever is larger (step_costs.h), and next to llama.cpp's figure on an H100 where one exists. Times are
// host wall-clock over whole runner steps (each ends with the sampled tokens on the host). "eager" rows run
// the same steps with graphs off; "forward only" rows run Model::forward on the runner's KV cache with the
// logits left on the device and no sampling: directly, and replayed from a CUDA graph captured once per
// batch size.
//
// Weights are random. By default the Llama shapes are written as bf16 safetensors shards (16 threads) into
// a RAM-backed folder and loaded through the ordinary loader; GPT-OSS, the MLA shapes and --loader random
// draw them with WeightLoader::random from a written config.json.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "ceilings.h"
#include "eagle_costs.h"
#include "rank_group.h"
#include "retrofit_variant.h"
#include "step_costs.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/pdl.h"
#include "model/registry.h"
#include "runner/model_runner.h"
#include "sample/cuda/cuda_sampler.h"
#include "weights/safetensors.h"

namespace drift::bench {
namespace {

// A Llama shape, or GPT-OSS's when it has experts (MXFP4 experts of width ffn, every other layer a
// 128-token sliding window, sinks, YaRN), or a whole config.json (the MLA families) whose numbers the
// fields then repeat for the per-op table.
struct Shape {
  std::string name;
  int64_t hidden, layers, heads, kv_heads, ffn, vocab;
  bool tied;
  double rope_factor;
  int64_t head_dim = 0;  // 0: hidden / heads
  int64_t experts = 0, top_k = 0;
  const char* config_json = nullptr;

  int64_t hd() const { return head_dim > 0 ? head_dim : hidden / heads; }
  bool moe() const { return experts > 0; }
  bool mla() const { return config_json != nullptr; }
};

const Shape kShapes[] = {
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, true, 32.0},
    {"llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, false, 8.0},
    {"llama-3.1-70b", 8192, 80, 64, 8, 28672, 128256, false, 8.0},  // over several GPUs (--tensor-parallel)
    {"gpt-oss-20b", 2880, 24, 64, 8, 2880, 201088, false, 32.0, 64, 32, 4},
    {"gpt-oss-120b", 2880, 36, 64, 8, 2880, 201088, false, 32.0, 64, 128, 4},
    // ../shared/anchor/make_models.py's dsv2lite: all 27 layers, the first dense, 64 routed experts top-6
    // and 2 shared; no q LoRA. llama.cpp's figures below are of that checkpoint in Q8_0.
    {"deepseek-v2-lite", 2048, 27, 16, 16, 10944, 102400, false, 1.0, 0, 64, 6,
     R"({"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "vocab_size": 102400,
"hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
"num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
"num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": null,
"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "topk_method": "greedy", "scoring_func": "softmax",
"norm_topk_prob": false, "routed_scaling_factor": 1.0, "max_position_embeddings": 32768, "rope_theta": 10000.0,
"tie_word_embeddings": false, "rms_norm_eps": 1e-06, "hidden_act": "silu", "dtype": "bfloat16", "eos_token_id": 1})"},
    // Youtu-LLM-2B: dense MLA (shared/research/ecosystem.md; rope_theta as the TransMLA derivative's).
    {"youtu-llm-2b", 2048, 32, 16, 16, 6144, 128256, true, 1.0, 0, 0, 0,
     R"({"architectures": ["YoutuForCausalLM"], "model_type": "youtu", "vocab_size": 128256, "hidden_size": 2048,
"intermediate_size": 6144, "num_hidden_layers": 32, "num_attention_heads": 16, "num_key_value_heads": 16,
"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
"qk_head_dim": 192, "rope_interleave": true, "tie_word_embeddings": true, "max_position_embeddings": 131072,
"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}, "rms_norm_eps": 1e-06, "hidden_act": "silu",
"dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001})"},
    // DeepSeek-V3's layers, four of 61: three dense, then one of 256 routed experts (top-8 in 4 of 8 groups,
    // sigmoid scores with a correction bias) and one shared; 128 heads over a q LoRA of 1536.
    {"deepseek-v3-4l", 7168, 4, 128, 128, 18432, 129280, false, 1.0, 0, 256, 8,
     R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
"hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 4,
"num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
"num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3, "moe_layer_freq": 1,
"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
"topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5,
"max_position_embeddings": 163840, "rope_theta": 10000.0, "tie_word_embeddings": false, "rms_norm_eps": 1e-06,
"hidden_act": "silu", "dtype": "bfloat16", "eos_token_id": 1})"},
};

// llama.cpp on this workplace's H100 (shared/research/engines.md, issue 6; GPT-OSS-20B: issue 12, measured
// 2026-11-24 with ../shared/anchor/run_gptoss20b.sh on the MXFP4 checkpoint of make_gptoss_mxfp4.py).
const std::map<std::string, double> kPeers = {
    {"llama-3.2-1b/decode b=1", 697.0},   {"llama-3.1-8b/decode b=1", 166.6}, {"llama-3.1-8b/prefill 512", 22400.0},
    {"gpt-oss-20b/decode b=1", 312.0},    {"gpt-oss-20b/decode b=16", 887.0}, {"gpt-oss-20b/decode b=64", 2200.0},
    {"gpt-oss-20b/prefill 512", 11100.0}, {"gpt-oss-20b/prefill 4096", 11800.0},
    {"deepseek-v2-lite/decode b=1", 272.0}, {"deepseek-v2-lite/decode b=16", 1030.0},
    {"deepseek-v2-lite/decode b=64", 2580.0}, {"deepseek-v2-lite/prefill 512", 11900.0},
    {"deepseek-v2-lite/prefill 4096", 10800.0},
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string bench_dir(const Shape& s) {
  const std::filesystem::path shm("/dev/shm");
  std::error_code ec;
  const bool ram = std::filesystem::is_directory(shm, ec) && std::filesystem::space(shm, ec).available > (size_t(40) << 30);
  return ((ram ? shm : std::filesystem::temp_directory_path()) / ("drift_bench_" + s.name)).string();
}

std::string write_gpt_oss_config(const Shape& s, const std::string& dir) {
  std::string layer_types;
  for (int64_t l = 0; l < s.layers; ++l)
    layer_types += fmt::format("{}\"{}_attention\"", l > 0 ? ", " : "", l % 2 ? "full" : "sliding");
  std::ofstream(dir + "/config.json") << fmt::format(
      R"({{"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": {}, "intermediate_size": {},
"num_hidden_layers": {}, "num_attention_heads": {}, "num_key_value_heads": {}, "head_dim": {}, "vocab_size": {},
"num_local_experts": {}, "num_experts_per_tok": {}, "sliding_window": 128, "layer_types": [{}],
"max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": false,
"attention_bias": true, "swiglu_limit": 7.0, "dtype": "bfloat16", "eos_token_id": 200002,
"quantization_config": {{"quant_method": "mxfp4"}},
"rope_parameters": {{"rope_type": "yarn", "rope_theta": 150000.0, "factor": {}, "beta_fast": 32.0, "beta_slow": 1.0,
"original_max_position_embeddings": 4096, "truncate": false}}}})",
      s.hidden, s.ffn, s.layers, s.heads, s.kv_heads, s.hd(), s.vocab, s.experts, s.top_k, layer_types, s.rope_factor);
  return dir;
}

std::string write_config(const Shape& s) {
  const std::string dir = bench_dir(s);
  std::filesystem::create_directories(dir);
  if (s.config_json != nullptr) {
    std::ofstream(dir + "/config.json") << s.config_json;
    return dir;
  }
  if (s.moe()) return write_gpt_oss_config(s, dir);
  std::ofstream(dir + "/config.json") << fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": {}, "intermediate_size": {},
"num_hidden_layers": {}, "num_attention_heads": {}, "num_key_value_heads": {}, "head_dim": {}, "vocab_size": {},
"max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": {},
"attention_bias": false, "mlp_bias": false, "dtype": "bfloat16",
"rope_parameters": {{"rope_type": "llama3", "rope_theta": 500000.0, "factor": {}, "low_freq_factor": 1.0,
"high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}})",
      s.hidden, s.ffn, s.layers, s.heads, s.kv_heads, s.hd(), s.vocab, s.tied ? "true" : "false",
      s.rope_factor);
  return dir;
}


// Uniform values of standard deviation 0.02 (norm weights: 1 + that), as bf16, from a counter-based
// generator so that any number of threads gives the same bytes.
std::vector<std::byte> random_tensor(int64_t numel, uint64_t seed, bool is_norm) {
  std::vector<std::byte> bytes(size_t(numel) * 2);
  uint16_t* out = reinterpret_cast<uint16_t*>(bytes.data());
  const int threads = int(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  const int64_t per = (numel + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([=] {
      for (int64_t i = t * per; i < std::min(numel, (t + 1) * per); ++i) {
        uint64_t z = seed * 0x9e3779b97f4a7c15ull + uint64_t(i) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
        z ^= z >> 29;
        const float u = float(z >> 40) / float(1ull << 24) - 0.5f;  // uniform in [-0.5, 0.5): std 1/sqrt(12)
        out[i] = f32_to_bf16((is_norm ? 1.0f : 0.0f) + u * 0.02f * 3.4641016f);
      }
    });
  for (auto& th : pool) th.join();
  return bytes;
}

// A Hugging Face style checkpoint of random bf16 weights: one safetensors shard per layer.
void write_random_checkpoint(const Shape& s, const std::string& dir) {
  const int64_t hd = s.hd();
  uint64_t seed = 1;
  auto tensor = [&](std::string name, std::vector<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const bool is_norm = name.ends_with("norm.weight");
    return weights::TensorToWrite{std::move(name), DType::kBF16, std::move(shape), random_tensor(numel, seed++, is_norm)};
  };
  auto write = [&](const std::string& file, const std::vector<weights::TensorToWrite>& tensors) {
    const Status st = weights::write_safetensors(dir + "/" + file, tensors);
    DRIFT_CHECK(st.ok(), "{}", st.to_string());
  };
  std::vector<weights::TensorToWrite> outer{tensor("model.embed_tokens.weight", {s.vocab, s.hidden}),
                                            tensor("model.norm.weight", {s.hidden})};
  if (!s.tied) outer.push_back(tensor("lm_head.weight", {s.vocab, s.hidden}));
  write("model-outer.safetensors", outer);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    write(fmt::format("model-layer-{:03}.safetensors", l),
          {tensor(p + "input_layernorm.weight", {s.hidden}), tensor(p + "post_attention_layernorm.weight", {s.hidden}),
           tensor(p + "self_attn.q_proj.weight", {s.heads * hd, s.hidden}),
           tensor(p + "self_attn.k_proj.weight", {s.kv_heads * hd, s.hidden}),
           tensor(p + "self_attn.v_proj.weight", {s.kv_heads * hd, s.hidden}),
           tensor(p + "self_attn.o_proj.weight", {s.hidden, s.heads * hd}),
           tensor(p + "mlp.gate_proj.weight", {s.ffn, s.hidden}), tensor(p + "mlp.up_proj.weight", {s.ffn, s.hidden}),
           tensor(p + "mlp.down_proj.weight", {s.hidden, s.ffn})});
  }
}

struct Row {
  std::string model, workload;
  double tok_s = 0, ms_per_step = 0, limit_tok_s = 0;
  std::string limit_by;
};


// Per-op roofline of one decode step's shapes: each linear at m = 1 (GEMV kernel and cuBLASLt), 16 and
// 64 rows, the decode attention at 1, 16 and 64 sequences of 576 tokens, and the small row-wise ops.
// Weights rotate among enough copies to exceed the L2 cache, so the times are DRAM times.
struct RoofRow {
  std::string model, op;
  int64_t rows = 0;
  double us = 0, bytes = 0;
};

void roofline(const Shape& s, backend::CudaOps& ops, std::vector<RoofRow>& out) {
  const int64_t hd = s.hd();
  struct Lin {
    const char* name;
    int64_t n, k;
    bool f32;
  };
  const Lin lins[] = {{"q_proj", s.heads * hd, s.hidden, false},     {"k_proj", s.kv_heads * hd, s.hidden, false},
                      {"v_proj", s.kv_heads * hd, s.hidden, false},  {"o_proj", s.hidden, s.heads * hd, false},
                      {"gate_up", 2 * s.ffn, s.hidden, false},       {"down", s.hidden, s.ffn, false},
                      {"lm_head", s.vocab, s.hidden, true}};
  const int reps = 20;
  for (const Lin& l : lins) {
    const double w_bytes = 2.0 * double(l.n * l.k);
    const int copies = int(std::max(1.0, std::ceil(256e6 / w_bytes)));
    std::vector<backend::Buffer> ws;
    for (int c = 0; c < copies; ++c) {
      ws.push_back(ops.alloc(DType::kBF16, {l.n, l.k}));
      DRIFT_CUDA_CHECK(cudaMemsetAsync(ws.back().view.data, 0x3c, size_t(w_bytes), ops.stream()));  // ~0.01
    }
    auto x = ops.alloc(DType::kBF16, {64, l.k});
    ops.copy_from_host(x.view, random_bf16(size_t(64 * l.k), 3).data());
    auto o = ops.alloc(l.f32 ? DType::kF32 : DType::kBF16, {64, l.n});
    // m = 1 through the GEMV kernel and cuBLASLt; 16 and 64 rows through cuBLASLt. The option is put back
    // afterwards: the model rows that follow run with the defaults.
    const bool gemv0 = ops.options().small_batch_gemv;
    struct Variant {
      int64_t rows;
      bool gemv;
      const char* label;
    };
    for (const Variant& v : {Variant{1, true, " gemv"}, Variant{1, false, " cuBLASLt"}, Variant{16, false, ""},
                             Variant{64, false, ""}}) {
      ops.set_small_batch_gemv(v.gemv);
      const Tensor xv = x.view.slice(0, v.rows), ov = o.view.slice(0, v.rows);
      int i = 0;
      const double t = time_on_stream(ops.stream(), 2, 5, [&] {
        for (int r = 0; r < reps; ++r) ops.linear(xv, ws[size_t(i++ % copies)].view, Tensor(), ov);
      }) / reps;
      out.push_back({s.name, fmt::format("{} [{}x{}]{}", l.name, l.n, l.k, v.label), v.rows, t * 1e6,
                     w_bytes + 2.0 * v.rows * l.k + (l.f32 ? 4.0 : 2.0) * v.rows * l.n});
    }
    ops.set_small_batch_gemv(gemv0);
  }
  // Decode attention: every sequence at 576 tokens, scattered over its own blocks.
  for (int64_t b : {1, 16, 64}) {
    const int64_t ctx = 576, bs = 16, per_seq = ctx / bs, blocks = b * per_seq;
    auto q = ops.alloc(DType::kBF16, {b, s.heads, hd});
    auto kc = ops.alloc(DType::kBF16, {blocks, bs, s.kv_heads, hd}), vc = ops.alloc(DType::kBF16, {blocks, bs, s.kv_heads, hd});
    auto attn = ops.alloc(DType::kBF16, {b, s.heads, hd});
    DRIFT_CUDA_CHECK(cudaMemsetAsync(kc.view.data, 0x3c, kc.view.nbytes(), ops.stream()));
    DRIFT_CUDA_CHECK(cudaMemsetAsync(vc.view.data, 0x3c, vc.view.nbytes(), ops.stream()));
    DRIFT_CUDA_CHECK(cudaMemsetAsync(q.view.data, 0x3c, q.view.nbytes(), ops.stream()));
    std::vector<int32_t> table(static_cast<size_t>(blocks)), qs(static_cast<size_t>(b + 1)),
        cl(static_cast<size_t>(b), static_cast<int32_t>(ctx));
    std::iota(table.begin(), table.end(), 0);
    std::iota(qs.begin(), qs.end(), 0);
    auto table_d = ops.alloc(DType::kI32, {b, per_seq}), qs_d = ops.alloc(DType::kI32, {b + 1}), cl_d = ops.alloc(DType::kI32, {b});
    ops.copy_from_host(table_d.view, table.data());
    ops.copy_from_host(qs_d.view, qs.data());
    ops.copy_from_host(cl_d.view, cl.data());
    backend::PagedAttentionParams p;
    p.q = q.view, p.k_cache = kc.view, p.v_cache = vc.view, p.out = attn.view;
    p.block_tables = table_d.view, p.query_start = qs_d.view, p.context_lens = cl_d.view;
    p.scale = 0.1f;
    const double t = time_on_stream(ops.stream(), 2, 5, [&] {
      for (int r = 0; r < reps; ++r) ops.paged_attention(p);
    }) / reps;
    out.push_back({s.name, "decode attention, 576 tokens", b, t * 1e6, 2.0 * 2.0 * double(b * ctx * s.kv_heads * hd)});
  }
  // Row-wise ops at one row: launch-bound, the floor a step pays per kernel.
  {
    auto a = ops.alloc(DType::kBF16, {1, 2 * s.ffn}), b = ops.alloc(DType::kBF16, {1, s.ffn}),
         w = ops.alloc(DType::kBF16, {s.hidden}), r = ops.alloc(DType::kBF16, {1, s.hidden}), n = ops.alloc(DType::kBF16, {1, s.hidden});
    DRIFT_CUDA_CHECK(cudaMemsetAsync(a.view.data, 0x3c, a.view.nbytes(), ops.stream()));
    DRIFT_CUDA_CHECK(cudaMemsetAsync(w.view.data, 0x3c, w.view.nbytes(), ops.stream()));
    DRIFT_CUDA_CHECK(cudaMemsetAsync(r.view.data, 0, r.view.nbytes(), ops.stream()));
    const Tensor x = a.view.view({2 * s.ffn}).slice(0, s.hidden).view({1, s.hidden});
    double t = time_on_stream(ops.stream(), 2, 5, [&] {
      for (int i = 0; i < reps; ++i) ops.add_rms_norm(r.view, x, w.view, 1e-5f, n.view);
    }) / reps;
    out.push_back({s.name, "add_rms_norm", 1, t * 1e6, 8.0 * s.hidden});
    t = time_on_stream(ops.stream(), 2, 5, [&] {
      for (int i = 0; i < reps; ++i) ops.silu_mul(a.view, b.view);
    }) / reps;
    out.push_back({s.name, "silu_mul", 1, t * 1e6, 6.0 * s.ffn});
  }
  ops.synchronize();
}

class ModelBench {
 public:
  // `ranks`: GPUs besides `ops` the model is split over (tensor parallelism), or none; `expert_parallel`:
  // their routed experts placed whole instead of split by width.
  // `retrofit`: MLA-lite and/or DSA-lite of that geometry loaded with the model (random weights), or the
  // original model. `kv_dtype`: the KV cache's element type (BF16, or F8E4M3 with a scale per row).
  ModelBench(const Shape& s, backend::CudaOps& ops, const Ceilings& ceil, int prompt, int gen, int max_batch,
             int max_prefill, bool fast_loader, model::RankBackends ranks = {}, bool expert_parallel = false,
             const RetrofitVariant& retrofit = {}, DType kv_dtype = DType::kBF16)
      : s_(s), ops_(ops), ceil_(ceil), prompt_(prompt), gen_(gen), kv_dtype_(kv_dtype) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string dir = write_config(s);
    model::LoadOptions lo;
    if (retrofit.mla_lite() || retrofit.dsa_lite()) {
      name_ = s.name + "+" + retrofit.name;
      lo.retrofit_file = dir + "-retrofit.safetensors";  // beside the folder: the folder's files are the model's
      write_random_retrofit(retrofit, s.layers, s.hidden, s.kv_heads, s.hd(), lo.retrofit_file);
    }
    // MXFP4 experts: WeightLoader::random draws their codes and scales; the MLA families' tensors are not
    // written by write_random_checkpoint.
    fast_loader = fast_loader && !s.moe() && s.config_json == nullptr;
    lo.random_weights = !fast_loader;
    lo.seed = 7;
    lo.expert_parallel = expert_parallel && s.moe();
    lo.kv_dtype = kv_dtype;
    // Retrofit variants of one shape load the same checkpoint: it is written once (run() removes it after them).
    if (fast_loader && !std::filesystem::exists(dir + "/model-outer.safetensors")) write_random_checkpoint(s, dir);
    const double t_write = seconds_since(t0);
    auto config = weights::load_model_config(dir);
    DRIFT_CHECK(config.ok(), "{}", config.status().to_string());
    costs_ = step_costs(*config);
    // Each GPU of a tensor-parallel group reads its share of the bytes and does its share of the FLOPs:
    // the group's limits are the sums of its GPUs' (the ceilings are one GPU's, measured on GPU 0).
    if (!ranks.others.empty()) {
      ceil_.bandwidth *= double(ranks.world_size());
      ceil_.bf16_rate *= double(ranks.world_size());
    }
    auto m = ranks.others.empty() ? model::load_model(dir, ops, lo)
                                  : model::load_tensor_parallel(dir, std::move(ranks), lo);
    DRIFT_CHECK(m.ok(), "{}", m.status().to_string());
    model_ = std::move(m).value();
    ops.synchronize();
    std::printf("%s: %.2fB parameters, random weights written in %.1f s, loaded in %.1f s\n", name_.c_str(),
                double(model_->num_parameters()) * 1e-9, t_write, seconds_since(t0) - t_write);
    num_kv_groups_ = model_->kv_specs(kv_dtype).size();
    // Each decode run starts at the prompt: its warm-up steps or its timed ones, whichever are more.
    const int decoded = prompt + std::max(gen, kWarmupSteps);
    print_pool_fit(decoded);
    blocks_per_seq_ = (decoded + kBlockSize - 1) / kBlockSize;
    max_batch_ = fitting_batch(max_batch);
    runner::RunnerConfig& rc = runner_config_;
    rc.max_num_tokens = std::max(max_prefill, 1024);
    rc.max_num_seqs = max_batch_;
    rc.cuda_graphs = true;
    rc.block_size = kBlockSize;
    rc.kv_dtype = kv_dtype;
    rc.max_model_len = std::max(max_prefill, decoded) + kBlockSize;
    prefill_first_block_ = blocks_per_seq_ * max_batch_;
    // The same block ids in every group's pool (group_tables): each pool as large as the full one.
    rc.num_blocks.assign(num_kv_groups_, prefill_first_block_ + rc.max_model_len / kBlockSize + 1);
    pool_blocks_ = rc.num_blocks[0];
    build_runner();
    greedy_.temperature = 0.0f;
    max_tokens_ = rc.max_num_tokens;
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> token(0, int32_t(s.vocab) - 1);
    for (auto& seq : tokens_) seq.clear();
    tokens_.resize(size_t(max_batch_));
    for (auto& seq : tokens_)
      for (int i = 0; i < std::max(decoded, max_prefill); ++i) seq.push_back(token(rng));
  }

  // A prompt of n tokens in one step; graphs off runs it eagerly (so that a backend option switched since a
  // graph of this shape was captured takes effect).
  Row prefill(int n, bool graphs = true, const std::string& label = "") {
    runner_->set_cuda_graphs(graphs);
    const std::vector<std::vector<int32_t>> table = group_tables(prefill_first_block_, (n + kBlockSize - 1) / kBlockSize);
    runner::SeqStep step{std::span<const int32_t>(tokens_[0].data(), size_t(n)), 0, n, table, true, false};
    const sample::RowSampling row = sampling(0, n);
    check(runner_->step_and_sample({&step, 1}, {&row, 1}));  // warm-up: cuBLASLt plans for this shape
    std::vector<double> times;
    for (int rep = 0; rep < 5; ++rep) {
      // With profile_prefill, the first timed step is what a profiler started with collection off sees.
      if (rep == 0 && profile_prefill_) DRIFT_CUDA_CHECK(cudaProfilerStart());
      const auto t0 = std::chrono::steady_clock::now();
      check(runner_->step_and_sample({&step, 1}, {&row, 1}));
      times.push_back(seconds_since(t0));
      if (rep == 0 && profile_prefill_) DRIFT_CUDA_CHECK(cudaProfilerStop());
    }
    runner_->set_cuda_graphs(true);
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    const double flops = 2.0 * costs_.macs_per_token * n + 2.0 * costs_.lm_head_macs +
                         costs_.attention_flops_per_key * double(n) * double(n + 1) / 2.0;
    const double bytes = costs_.weight_bytes(n);
    const double floor_t = std::max(flops / ceil_.bf16_rate, bytes / ceil_.bandwidth);
    return {name_, label.empty() ? fmt::format("prefill {}", n) : label, n / t, t * 1e3, n / floor_t,
            flops / ceil_.bf16_rate >= bytes / ceil_.bandwidth ? "bf16 FLOPs" : "bytes"};
  }

  // Decode steps as the engine runs them: `graphs` replays them from CUDA graphs, otherwise every step
  // launches its kernels directly. The tokens fed back are the bench's own (the sampled ones are dropped),
  // so every run sees the same sequence.
  Row decode(int batch, bool graphs, const std::string& label) {
    std::vector<std::vector<std::vector<int32_t>>> tables;
    for (int i = 0; i < batch; ++i) tables.push_back(group_tables(i * blocks_per_seq_, blocks_per_seq_));
    prefill_prompts(batch);  // as many prompts per step as max_num_tokens allows
    runner_->set_cuda_graphs(graphs);
    const int64_t replays_before = runner_->num_graph_replays();
    auto decode_steps = [&](int from, int count) {
      std::vector<runner::SeqStep> steps(static_cast<size_t>(batch));
      std::vector<sample::RowSampling> rows(static_cast<size_t>(batch));
      for (int j = 0; j < count; ++j) {
        for (int i = 0; i < batch; ++i) {
          steps[size_t(i)] = {tokens_[size_t(i)], from + j, 1, tables[size_t(i)], true, false};
          rows[size_t(i)] = sampling(i, from + j);
        }
        check(runner_->step_and_sample(steps, rows));
      }
    };
    decode_steps(prompt_, kWarmupSteps);  // warm-up, and the graph capture (rewritten below)
    const runner::ModelRunner::StepTimes before = runner_->step_times();
    const auto t0 = std::chrono::steady_clock::now();
    // The timed steps alone are what a profiler started with its collection off sees
    // (tools/gpu/profile_decode.sh: ncu --profile-from-start off); without one these do nothing.
    if (!profile_prefill_) DRIFT_CUDA_CHECK(cudaProfilerStart());
    decode_steps(prompt_, gen_);
    if (!profile_prefill_) DRIFT_CUDA_CHECK(cudaProfilerStop());
    Row r = decode_limits(batch, seconds_since(t0) / gen_);
    r.workload = label;
    // The runner's host work before the device can start each step (check, pack, upload, launch).
    const double launch_ms = (runner_->step_times().launch - before.launch) * 1e3 / gen_;
    std::printf("  %s: %lld of %d steps replayed from a graph (%lld graphs so far); runner launch %.3f ms a step\n",
                label.c_str(), static_cast<long long>(runner_->num_graph_replays() - replays_before), gen_ + kWarmupSteps,
                static_cast<long long>(runner_->num_graphs()), launch_ms);
    runner_->set_cuda_graphs(true);
    return r;
  }

  // The decode loop without the runner: token ids, positions, slots and lengths go up in one copy from
  // pinned memory, logits stay on the device. With `graph`, one forward is captured and replayed.
  // Runs after decode(batch) through the runner, whose prompts' KV it reuses (same blocks, same tokens).
  Row decode_forward_only(int batch, bool graph) {
    const int width = blocks_per_seq_;
    std::vector<int32_t> tables_h(size_t(batch) * size_t(width)), fixed(size_t(2 * batch + 1));
    for (int i = 0; i < batch; ++i)
      for (int b = 0; b < width; ++b) tables_h[size_t(i * width + b)] = i * blocks_per_seq_ + b;
    for (int i = 0; i <= batch; ++i) fixed[size_t(i)] = i;                         // query_start
    for (int i = 0; i < batch; ++i) fixed[size_t(batch + 1 + i)] = i;               // logits_rows
    auto tables = ops_.alloc(DType::kI32, {batch, width});
    auto fixed_d = ops_.alloc(DType::kI32, {2 * batch + 1});
    auto step_d = ops_.alloc(DType::kI32, {4 * batch});  // token ids, positions, slots, context lengths
    auto logits = ops_.alloc(DType::kF32, {batch, s_.vocab});
    ops_.copy_from_host(tables.view, tables_h.data());
    ops_.copy_from_host(fixed_d.view, fixed.data());
    int32_t* step_h = nullptr;
    DRIFT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&step_h), sizeof(int32_t) * 4 * size_t(batch)));

    model::ForwardContext ctx;
    ctx.num_tokens = ctx.num_seqs = ctx.num_logits = batch;
    ctx.max_query_len = 1;
    const Tensor all = step_d.view;
    ctx.token_ids = all.slice(0, batch);
    ctx.positions = all.slice(batch, 2 * batch);
    for (size_t g = 0; g < num_kv_groups_; ++g) ctx.kv_groups.push_back({all.slice(2 * batch, 3 * batch), tables.view});
    ctx.context_lens = all.slice(3 * batch, 4 * batch);
    ctx.query_start = fixed_d.view.slice(0, batch + 1);
    ctx.logits_rows = fixed_d.view.slice(batch + 1, 2 * batch + 1);
    auto upload_step = [&](int pos) {
      for (int i = 0; i < batch; ++i) {
        step_h[i] = tokens_[size_t(i)][size_t(pos)];
        step_h[batch + i] = pos;
        step_h[2 * batch + i] = (i * blocks_per_seq_ + pos / kBlockSize) * kBlockSize + pos % kBlockSize;
        step_h[3 * batch + i] = pos + 1;
      }
      DRIFT_CUDA_CHECK(cudaMemcpyAsync(step_d.view.data, step_h, sizeof(int32_t) * 4 * size_t(batch),
                                       cudaMemcpyHostToDevice, ops_.stream()));
    };
    upload_step(prompt_);
    model_->forward(ctx, logits.view);  // warm-up: cuBLASLt plans for this batch
    ops_.synchronize();
    // A tensor-parallel model records every rank's share.
    std::unique_ptr<backend::CapturedWork> captured = graph ? model_->capture_forward(ops_, ctx, logits.view) : nullptr;
    auto run_steps = [&] {
      for (int j = 0; j < gen_; ++j) {
        upload_step(prompt_ + j);
        if (captured != nullptr)
          captured->replay();
        else
          model_->forward(ctx, logits.view);
      }
      ops_.synchronize();
    };
    run_steps();  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    run_steps();
    const double step_t = seconds_since(t0) / gen_;
    cudaFreeHost(step_h);
    Row r = decode_limits(batch, step_t);
    r.workload = fmt::format("decode b={} forward only{}", batch, graph ? ", CUDA graph" : "");
    return r;
  }

  // EAGLE-3's costs on sequence 0 after its prompt (eagle_costs.h), with a random head of the target's
  // shape. The target then captures the head's hidden states in every step, as the engine's does.
  std::vector<EagleCostRow> eagle(const std::vector<int>& tree_sizes, int depth, int top_k) {
    model::Eagle3Shape shape;
    shape.draft_vocab = std::min<int64_t>(s_.vocab, 32000);  // the published Llama-3.1-8B heads' vocabulary
    shape.capture_layers = {2, int32_t(s_.layers / 2), int32_t(s_.layers - 3)};
    const Status taps = model_->set_hidden_taps(shape.capture_layers);
    DRIFT_CHECK(taps.ok(), "{}", taps.to_string());
    runner_.reset();
    build_runner();  // the taps are allocated with the workspace
    prefill_prompts(1);
    EagleCostInputs in;
    in.make_head = [this, shape] {
      auto head = model::random_eagle3_head(*model_, ops_, 7, shape);
      check(head);
      return std::move(head).value();
    };
    in.target = model_.get();
    in.runner = runner_.get();
    in.ops = &ops_;
    in.tokens = tokens_[0];
    in.table = group_tables(0, blocks_per_seq_);
    in.context = prompt_;
    in.first_free_block = pool_blocks_;
    in.tree_sizes = tree_sizes;
    in.depth = depth;
    in.top_k = top_k;
    return eagle_costs(in);
  }

 private:
  static constexpr int kBlockSize = 16;
  static constexpr int kWarmupSteps = 3;  // decode steps before the timed ones (the graph capture among them)

  void prefill_prompts(int batch) {
    if (prompt_ > max_tokens_) return prefill_long_prompts(batch);
    for (int first = 0; first < batch;) {
      std::vector<runner::SeqStep> steps;
      std::vector<sample::RowSampling> rows;
      std::vector<std::vector<std::vector<int32_t>>> tables;
      tables.reserve(size_t(batch));
      for (int tokens = 0; first < batch && tokens + prompt_ <= max_tokens_; ++first, tokens += prompt_) {
        tables.push_back(group_tables(first * blocks_per_seq_, blocks_per_seq_));
        steps.push_back({tokens_[size_t(first)], 0, prompt_, tables.back(), true, false});
        rows.push_back(sampling(first, prompt_));
      }
      check(runner_->step_and_sample(steps, rows));
    }
  }

  // Prompts longer than a step's tokens, one chunk of max_tokens_ a step (chunked prefill).
  void prefill_long_prompts(int batch) {
    for (int i = 0; i < batch; ++i) {
      const std::vector<std::vector<int32_t>> table = group_tables(i * blocks_per_seq_, blocks_per_seq_);
      for (int done = 0; done < prompt_; done += max_tokens_) {
        const int n = std::min(max_tokens_, prompt_ - done);
        const bool last = done + n == prompt_;  // only the last chunk samples
        runner::SeqStep step{tokens_[size_t(i)], done, n, table, last, false};
        const sample::RowSampling row = sampling(i, done + n);
        check(runner_->step_and_sample({&step, 1}, {&row, last ? 1u : 0u}));
      }
    }
  }

  // The largest batch up to `wanted` whose KV (every group, prompt + gen tokens each, plus a prefill
  // sequence) fits beside the weights with 3 GiB left for step buffers (print_pool_fit gives the pool's
  // own count); says so when it is smaller.
  int fitting_batch(int wanted) const {
    const double per_seq = double(blocks_per_seq_) * kBlockSize * double(model_->kv_bytes_per_token(kv_dtype_));
    const double room = double(ops_.free_memory_bytes()) - 3.0 * double(1ull << 30) - per_seq;
    const int fits = int(std::max(0.0, std::floor(room / per_seq)));
    if (fits < wanted)
      std::printf("  batches over %d do not fit on this GPU (%.2f GiB of KV a sequence): they run at %d\n", fits,
                  per_seq / double(1ull << 30), std::max(1, fits));
    return std::max(1, std::min(wanted, fits));
  }

 public:
  int max_batch() const { return max_batch_; }
  // The profiler brackets one prefill step instead of the timed decode steps.
  void set_profile_prefill(bool on) { profile_prefill_ = on; }

 private:
  // Greedy, as the llama.cpp figures were taken; the output so far is the bench's tokens after the prompt.
  sample::RowSampling sampling(int seq, int pos) const {
    const std::vector<int32_t>& t = tokens_[size_t(seq)];
    const size_t prompt = size_t(std::min(pos, prompt_));
    return {&greedy_, std::span<const int32_t>(t.data(), prompt),
            std::span<const int32_t>(t.data() + prompt, size_t(pos) - prompt), 0, uint64_t(pos) - prompt};
  }

  Row decode_limits(int batch, double step_t) const {
    const double avg_context = prompt_ + (gen_ + 1) / 2.0;
    const auto& retrofit = model_->config().retrofit;
    const int64_t dsa_top_k = retrofit && retrofit->dsa_lite ? retrofit->dsa_lite->top_k : 0;
    const double kv_bytes = double(batch) * kv_read_bytes(model_->kv_specs(kv_dtype_), avg_context, dsa_top_k);
    const double flops = 2.0 * batch * (costs_.macs_per_token + costs_.lm_head_macs) +
                         batch * avg_context * costs_.attention_flops_per_key;
    const double bytes_t = (costs_.weight_bytes(batch) + kv_bytes) / ceil_.bandwidth, flops_t = flops / ceil_.bf16_rate;
    return {name_, "", batch / step_t, step_t * 1e3, batch / std::max(bytes_t, flops_t),
            bytes_t >= flops_t ? "bytes" : "bf16 FLOPs"};
  }

  // How many sequences of `tokens` the memory left after the weights holds in this KV dtype and in BF16
  // (a pool of 90% of it, before the bench allocates its own).
  void print_pool_fit(int tokens) const {
    const double pool = 0.9 * double(ops_.free_memory_bytes());
    const auto fit = [&](DType t) { return int64_t(pool / (double(model_->kv_bytes_per_token(t)) * tokens)); };
    std::printf("  KV cache %s: %lld bytes a token; %lld sequences of %d tokens fit %.1f GiB (BF16: %lld bytes a "
                "token, %lld sequences)\n",
                std::string(dtype_name(kv_dtype_)).c_str(), (long long)model_->kv_bytes_per_token(kv_dtype_),
                (long long)fit(kv_dtype_), tokens, pool / double(1 << 30),
                (long long)model_->kv_bytes_per_token(DType::kBF16), (long long)fit(DType::kBF16));
  }

  static std::vector<int32_t> blocks(int first, int n) {
    std::vector<int32_t> b(static_cast<size_t>(n));
    std::iota(b.begin(), b.end(), first);
    return b;
  }
  // The same blocks in every KV group's pool (GPT-OSS: sliding and full).
  std::vector<std::vector<int32_t>> group_tables(int first, int n) const {
    return std::vector<std::vector<int32_t>>(num_kv_groups_, blocks(first, n));
  }
  template <class T>
  static void check(const Expected<T>& r) {
    DRIFT_CHECK(r.ok(), "{}", r.status().to_string());
  }
  // Rows a step samples: a decode batch, or a verify step's tree (eagle()).
  void build_runner() {
    runner_ = std::make_unique<runner::ModelRunner>(
        *model_, ops_, runner_config_, sample::make_cuda_sampler(ops_, std::max(max_batch_, 128), model_->vocab_size()));
  }

  const Shape& s_;
  std::string name_ = s_.name;  // the shape's name, + the retrofit variant's
  int max_batch_ = 1;
  bool profile_prefill_ = false;
  backend::CudaOps& ops_;
  Ceilings ceil_;
  int prompt_, gen_;
  DType kv_dtype_;
  int max_tokens_ = 0, blocks_per_seq_ = 0, prefill_first_block_ = 0, pool_blocks_ = 0;
  size_t num_kv_groups_ = 1;
  StepCosts costs_;
  std::unique_ptr<model::Model> model_;
  runner::RunnerConfig runner_config_;
  std::unique_ptr<runner::ModelRunner> runner_;
  std::vector<std::vector<int32_t>> tokens_;
  SamplingParams greedy_;
};

// The costs, and the speedup they give at tau tokens per verify step: tau decode steps' time over one
// verify step and one drafting round.
// taus: one per tree size (the verify rows in order), or one for all of them.
void print_eagle(const std::string& model, const std::vector<EagleCostRow>& rows, const std::vector<double>& taus) {
  const double decode = rows.front().ms, round = rows.back().ms;
  std::printf("\nEAGLE-3 on %s (batch 1)\n| step | rows | ms | / decode step |\n|---|---:|---:|---:|\n", model.c_str());
  for (const EagleCostRow& r : rows) std::printf("| %s | %d | %.3f | %.2f |\n", r.what.c_str(), r.rows, r.ms, r.ms / decode);
  if (taus.empty()) return;
  std::printf("\nprojected speedup: tau x decode / (verify + drafting round)\n| tree | tau | speedup |\n|---|---:|---:|\n");
  size_t i = 0;
  for (const EagleCostRow& r : rows) {
    if (r.what.rfind("target verify", 0) != 0) continue;
    const double tau = taus[std::min(i++, taus.size() - 1)];
    std::printf("| %s | %.2f | %.2fx |\n", r.what.c_str(), tau, tau * decode / (r.ms + round));
  }
}

// The all-reduces a decode step of `s` makes under tensor parallelism (one after attention and one after
// the MLP per layer) at each batch size, timed alone on the group.
void print_all_reduce(const Shape& s, const model::RankBackends& ranks, const std::vector<int>& batches) {
  std::printf("\nall-reduce on %d GPUs, %s (bf16 [batch, %lld], 2 per layer x %lld layers; 64 calls back to back; "
              "+ norm: with the residual add and RMSNorm after it)\n"
              "| batch | NCCL us | NCCL + norm us | peer kernel us | peer + norm fused us | per decode step ms (taken) |\n"
              "|---:|---:|---:|---:|---:|---:|\n",
              ranks.world_size(), s.name.c_str(), static_cast<long long>(s.hidden), static_cast<long long>(s.layers));
  for (int batch : batches) {
    const double nccl = all_reduce_us(ranks, batch, s.hidden, {.peer = false});
    const double nccl_norm = all_reduce_us(ranks, batch, s.hidden, {.peer = false, .with_norm = true});
    const double peer = all_reduce_us(ranks, batch, s.hidden, {.peer = true});
    const double fused = all_reduce_us(ranks, batch, s.hidden, {.peer = true, .with_norm = true});
    const double taken = std::isnan(fused) ? nccl_norm : fused;
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.3f |\n", batch, nccl, nccl_norm, peer, fused,
                taken * 2.0 * double(s.layers) * 1e-3);
  }
  std::fflush(stdout);
}

struct Options {
  std::vector<std::string> models{"llama-3.1-8b", "llama-3.2-1b"};
  std::vector<int> batches{1, 16, 64}, prefills{512, 4096};
  int prompt = 512, gen = 128;
  bool gemv_compare = false, forward_only = true, eager = true, roof = false, ablate = false, roofline_only = false;
  bool moe_kernels = false, omit_families = false;
  bool mla_prefill = false, profile_prefill = false;
  std::string markdown, loader = "fast";
  std::vector<int> eagle_trees;
  std::vector<double> eagle_taus;
  int eagle_depth = 7, eagle_top_k = 8;
  int tensor_parallel = 1;
  bool expert_parallel = false;
  std::string kv_cache_dtype = "bf16";
  int64_t gemm_autotune_max_rows = backend::CudaOptions{}.gemm_autotune_max_rows;
  int32_t split_kv_max_tokens_per_seq = backend::CudaOptions{}.split_kv_max_tokens_per_seq;
  bool moe_wgmma = backend::CudaOptions{}.moe_wgmma;
  bool decode_head_slices = backend::CudaOptions{}.decode_head_slices;
  bool mla_wgmma = backend::CudaOptions{}.mla_wgmma;
  bool moe_one_token_stream = backend::CudaOptions{}.moe_one_token_stream;
  bool moe_wgmma_wide = backend::CudaOptions{}.moe_wgmma_wide;
  std::vector<std::string> retrofits{"original"};
  // Issue 16's geometry at the 8B shape: the trained default model's latent fraction (48 of 256 values)
  // and one shared RoPE key keeping 1 in 4 frequencies (tools/retrofit's defaults: a cache row of 384 + 32),
  // DSA-lite's indexer as trained (4 heads x 32) with top-2048.
  RetrofitVariant geometry{.mla_rank = 384, .mla_freqs = 16, .mla_shared_rope = true, .index_heads = 4,
                           .index_dim = 32, .top_k = 2048};
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.models, "shapes to run")->check(CLI::IsMember({"llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v2-lite", "youtu-llm-2b", "deepseek-v3-4l"}));
  app.add_option("--batch", o.batches, "decode batch sizes");
  app.add_option("--prefill", o.prefills, "prefill lengths");
  app.add_option("--prompt", o.prompt, "prompt tokens before decoding");
  app.add_option("--gen", o.gen, "decode steps timed");
  app.add_option("--gemv-compare", o.gemv_compare, "also time batch-1 decode with cuBLASLt instead of the GEMV kernel");
  app.add_option("--forward-only", o.forward_only, "also time decode without the runner (direct and CUDA graph)");
  app.add_option("--eager", o.eager, "also time decode through the runner with CUDA graphs off");
  app.add_option("--loader", o.loader, "fast: bf16 shards written by 16 threads; random: WeightLoader::random")
      ->check(CLI::IsMember({"fast", "random"}));
  app.add_option("--roofline", o.roof, "time each op of a decode step alone (per model shape)");
  app.add_option("--mla-prefill", o.mla_prefill,
                 "MLA shapes: prefill rows run eagerly in the expanded and the absorbed form (the switch point)");
  app.add_option("--profile-prefill", o.profile_prefill,
                 "a profiler started with collection off sees the first timed prefill step instead of the decode steps");
  app.add_option("--moe-kernels", o.moe_kernels, "MoE shapes: batch-1 forward-only graph rows with the one-token experts on and off");
  app.add_option("--ablate", o.ablate,
                 "batch-1 forward-only graph rows with PDL, the SwiGLU GEMV epilogue, the GEMV's split rule and the "
                 "streaming GEMV each switched");
  app.add_option("--omit-families", o.omit_families,
                 "graph rows of each --batch, each without one op family (attention, norms, ...): what it costs in the step");
  app.add_option("--roofline-only", o.roofline_only, "only the ceilings and the per-op table; no models");
  app.add_option("--markdown", o.markdown, "write the table here too");
  app.add_option("--gemm-autotune", o.gemm_autotune_max_rows,
                 "cuBLASLt products of at most this many rows time a few algorithms on first use (0: off)");
  app.add_option("--moe-wgmma", o.moe_wgmma, "routed experts' prefill tiles on wgmma (CudaOptions::moe_wgmma)");
  app.add_option("--moe-wgmma-wide", o.moe_wgmma_wide,
                 "routed experts' wgmma prefill tiles 128 pairs wide (CudaOptions::moe_wgmma_wide)");
  app.add_option("--moe-one-token-stream", o.moe_one_token_stream,
                 "batch-1 routed experts on resident CTAs (CudaOptions::moe_one_token_stream)");
  app.add_option("--decode-head-slices", o.decode_head_slices,
                 "decode attention at few pairs over slices of each group's heads (CudaOptions::decode_head_slices)");
  app.add_option("--mla-wgmma", o.mla_wgmma,
                 "MLA (and MLA-lite) attention on warpgroup MMA where it fits (CudaOptions::mla_wgmma)");
  app.add_option("--split-kv-tokens", o.split_kv_max_tokens_per_seq,
                 "steps of at most this many tokens a sequence attend through the split-KV decode kernel (0: off)");
  app.add_option("--eagle", o.eagle_trees, "EAGLE-3 costs: verify steps of these tree sizes and a drafting round (batch 1)");
  app.add_option("--eagle-tau", o.eagle_taus,
                 "tokens per verify step (measured), one per --eagle tree size or one for all, for the projected speedup");
  app.add_option("--eagle-depth", o.eagle_depth, "drafting round depth");
  app.add_option("--eagle-topk", o.eagle_top_k, "drafting round top-k");
  app.add_option("--tensor-parallel", o.tensor_parallel,
                 "split each model over GPUs 0..N-1 (NCCL); the all-reduce time per step is printed")
      ->check(CLI::Range(1, 8));
  app.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "KV cache element type: bf16, or fp8 (e4m3 with an fp32 scale per token and kv head)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_flag("--expert-parallel", o.expert_parallel,
               "with --tensor-parallel: the MoE shapes' routed experts placed whole over the GPUs (dense shapes ignore it)");
  app.add_option("--retrofit", o.retrofits, "variants of the Llama shapes: original, mla-lite, dsa-lite, both");
  app.add_option("--mla-rank", o.geometry.mla_rank, "MLA-lite d_c");
  app.add_option("--mla-freqs", o.geometry.mla_freqs, "MLA-lite RoPE frequencies kept per RoPE key");
  app.add_option("--mla-shared-rope", o.geometry.mla_shared_rope,
                 "MLA-lite: one RoPE key for every KV head (a cache row of d_c + 2 x freqs)");
  app.add_option("--dsa-top-k", o.geometry.top_k, "DSA-lite positions per query");
}

void print_row(const Row& r) { std::printf("  %-10s %9.1f tok/s\n", r.workload.c_str(), r.tok_s); }

// Each switch alone against the defaults, and PDL with the SwiGLU epilogue both off, then the GEMV's other
// split rule: the forward of one decode token, replayed from a graph captured under that setting.
void ablate_rows(ModelBench& b, backend::CudaOps& ops, std::vector<Row>& rows) {
  struct Setting {
    bool pdl, fuse;
    const char* label;
  };
  const bool pdl0 = backend::cuda::pdl_enabled();
  const bool fuse0 = ops.options().fuse_swiglu_gemv;
  for (const Setting& set : {Setting{pdl0, fuse0, "defaults"}, Setting{!pdl0, fuse0, "PDL switched"},
                             Setting{pdl0, !fuse0, "SwiGLU GEMV epilogue switched"},
                             Setting{false, false, "PDL and SwiGLU epilogue off"}}) {
    backend::cuda::set_pdl_enabled(set.pdl);
    ops.set_fuse_swiglu_gemv(set.fuse);
    Row r = b.decode_forward_only(1, true);
    r.workload = fmt::format("decode b=1 forward, graph: {} (pdl {}, swiglu epilogue {})", set.label,
                             set.pdl ? "on" : "off", set.fuse ? "on" : "off");
    rows.push_back(r);
    print_row(r);
  }
  backend::cuda::set_pdl_enabled(pdl0);
  ops.set_fuse_swiglu_gemv(fuse0);
  ops.set_gemv_split_by_iterations(!ops.options().gemv_split_by_iterations);
  Row r = b.decode_forward_only(1, true);
  r.workload = fmt::format("decode b=1 forward, graph: GEMV split by {}",
                           ops.options().gemv_split_by_iterations ? "warp iterations" : "bytes per CTA");
  rows.push_back(r);
  print_row(r);
  ops.set_gemv_split_by_iterations(!ops.options().gemv_split_by_iterations);
  ops.set_gemv_stream(!ops.options().gemv_stream);
  Row s = b.decode_forward_only(1, true);
  s.workload = fmt::format("decode b=1 forward, graph: streaming GEMV {}", ops.options().gemv_stream ? "on" : "off");
  rows.push_back(s);
  print_row(s);
  ops.set_gemv_stream(!ops.options().gemv_stream);
}

// What each op family costs inside a captured decode step of each batch size: the step replayed with the
// family left out (CudaOptions::omitted_families; its outputs then stale, so only the times mean
// anything), as the difference from the whole step.
void omitted_family_rows(ModelBench& b, backend::CudaOps& ops, const std::vector<int>& batches, std::vector<Row>& rows) {
  using backend::OpFamily;
  const std::pair<OpFamily, const char*> families[] = {
      {OpFamily::kAttention, "attention"},          {OpFamily::kNorms, "norms"},
      {OpFamily::kRopeWrite, "rope and KV writes"}, {OpFamily::kLinears, "bf16 linears"},
      {OpFamily::kLogits, "fp32 linears (lm_head, routers)"}, {OpFamily::kExperts, "routed experts"}};
  for (int batch : batches) {
    const Row whole = b.decode_forward_only(batch, true);
    for (const auto& [family, name] : families) {
      ops.set_omitted_families(uint32_t(family));
      Row r = b.decode_forward_only(batch, true);
      ops.set_omitted_families(0);
      r.workload = fmt::format("decode b={} forward, graph, without {}: {:.1f} us of {:.3f} ms", batch, name,
                               (whole.ms_per_step - r.ms_per_step) * 1e3, whole.ms_per_step);
      rows.push_back(r);
      print_row(r);
    }
  }
}

// Routed experts at one token (CudaOptions::moe_one_token_kernels): the forward of one decode step,
// replayed from a graph captured with the choices read directly and grouped.
void moe_kernel_rows(ModelBench& b, backend::CudaOps& ops, std::vector<Row>& rows) {
  for (const bool one_token : {true, false}) {
    ops.set_moe_one_token_kernels(one_token);
    Row r = b.decode_forward_only(1, true);
    r.workload = fmt::format("decode b=1 forward, graph: one-token experts {}", one_token ? "on" : "off");
    rows.push_back(r);
    print_row(r);
  }
  ops.set_moe_one_token_kernels(true);
}

// MLA prefill in each form (CudaOptions::mla_expanded_prefill), eagerly: where the expanded form starts to pay.
void mla_prefill_rows(ModelBench& b, backend::CudaOps& ops, const std::vector<int>& prefills, std::vector<Row>& rows) {
  for (int n : prefills)
    for (const bool expanded : {true, false}) {
      ops.set_mla_expanded_prefill(expanded);
      rows.push_back(b.prefill(n, false, fmt::format("prefill {} eager, {}", n, expanded ? "expanded" : "absorbed")));
      print_row(rows.back());
    }
  ops.set_mla_expanded_prefill(true);
}

// Every row the options ask of one loaded model.
void bench_model(ModelBench& b, const Shape& s, const Options& o, backend::CudaOps& ops, std::vector<Row>& rows) {
  for (int n : o.prefills) {
    rows.push_back(b.prefill(n));
    print_row(rows.back());
  }
  // A batch that does not fit runs at the largest that does (fitting_batch said so).
  std::vector<int> batches;
  for (int batch : o.batches) {
    const int fits = std::min(batch, b.max_batch());
    if (std::find(batches.begin(), batches.end(), fits) == batches.end()) batches.push_back(fits);
  }
  const bool tp = o.tensor_parallel > 1;
  const std::string tp_label =
      tp ? fmt::format(" {}{}", o.expert_parallel && s.moe() ? "ep" : "tp", o.tensor_parallel) : "";
  for (int batch : batches) {
    rows.push_back(b.decode(batch, true, fmt::format("decode b={}{}", batch, tp_label)));
    print_row(rows.back());
  }
  if (o.eager)
    for (int batch : batches) {
      rows.push_back(b.decode(batch, false, fmt::format("decode b={}{} eager", batch, tp_label)));
      print_row(rows.back());
    }
  if (o.gemv_compare && std::find(batches.begin(), batches.end(), 1) != batches.end()) {
    ops.set_small_batch_gemv(false);
    rows.push_back(b.decode(1, true, "decode b=1 (cuBLASLt)"));
    ops.set_small_batch_gemv(true);
  }
  if (o.forward_only)
    for (int batch : batches)
      for (bool graph : {false, true}) {
        rows.push_back(b.decode_forward_only(batch, graph));
        print_row(rows.back());
      }
  if (o.ablate) ablate_rows(b, ops, rows);
  if (o.omit_families) omitted_family_rows(b, ops, batches, rows);
  if (o.moe_kernels && s.moe()) moe_kernel_rows(b, ops, rows);
  if (o.mla_prefill && s.mla()) mla_prefill_rows(b, ops, o.prefills, rows);
  if (!o.eagle_trees.empty()) print_eagle(s.name, b.eagle(o.eagle_trees, o.eagle_depth, o.eagle_top_k), o.eagle_taus);
}

std::string format_table(const cudaDeviceProp& prop, const Ceilings& ceil, const Options& o, const std::vector<Row>& rows,
                         const std::vector<RoofRow>& roof_rows) {
  std::string table = fmt::format(
      "GPU: {} | copy {:.2f} TB/s | bf16 GEMM {:.0f} TFLOP/s | prompt {} gen {} | KV {}\n\n"
      "| model | workload | Drift tok/s | ms/step | limit tok/s | limited by | Drift/limit | llama.cpp H100 |\n"
      "|---|---|---:|---:|---:|---|---:|---:|\n",
      prop.name, ceil.bandwidth * 1e-12, ceil.bf16_rate * 1e-12, o.prompt, o.gen, o.kv_cache_dtype);
  for (const Row& r : rows) {
    const auto peer = kPeers.find(r.model + "/" + r.workload);
    table += fmt::format("| {} | {} | {:.1f} | {:.3f} | {:.1f} | {} | {:.0f}% | {} |\n", r.model, r.workload, r.tok_s,
                         r.ms_per_step, r.limit_tok_s, r.limit_by, 100.0 * r.tok_s / r.limit_tok_s,
                         peer == kPeers.end() ? "" : fmt::format("{:.1f}", peer->second));
  }
  if (!roof_rows.empty()) {
    table += "\n| model | op | rows | us | GB/s | of copy bandwidth |\n|---|---|---:|---:|---:|---:|\n";
    for (const RoofRow& r : roof_rows)
      table += fmt::format("| {} | {} | {} | {:.1f} | {:.0f} | {:.0f}% |\n", r.model, r.op, r.rows, r.us,
                           r.bytes / r.us * 1e-3, 100.0 * r.bytes / (r.us * 1e-6) / ceil.bandwidth);
  }
  if (!o.markdown.empty()) std::ofstream(o.markdown) << table;
  return table;
}

const Shape& shape_named(const std::string& name) {
  return *std::find_if(std::begin(kShapes), std::end(kShapes), [&](const Shape& x) { return x.name == name; });
}

int run(int argc, char** argv) {
  CLI::App app{"Decode and prefill speed of random-weight models of real shapes on the CUDA backend"};
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach a log even if the run is cut short
  if (o.tensor_parallel > 1) {
    // The GEMV comparison and the ablations switch options of rank 0's backend alone; the taps EAGLE-3 reads
    // are one rank's.
    o.gemv_compare = o.ablate = o.omit_families = false;
    o.eagle_trees.clear();
  }
  if (backend::cuda_device_count() == 0) {
    std::fprintf(stderr, "drift_bench_decode: no CUDA device\n");
    return 1;
  }
  backend::CudaOps ops({.mla_wgmma = o.mla_wgmma,
                        .decode_head_slices = o.decode_head_slices,
                        .moe_one_token_stream = o.moe_one_token_stream,
                        .moe_wgmma = o.moe_wgmma,
                        .moe_wgmma_wide = o.moe_wgmma_wide,
                        .gemm_autotune_max_rows = o.gemm_autotune_max_rows,
                        .split_kv_max_tokens_per_seq = o.split_kv_max_tokens_per_seq});
  cudaDeviceProp prop{};
  DRIFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const Ceilings ceil = measure_ceilings(ops);
  std::printf("device: %s, %d SMs; copy bandwidth %.2f TB/s (read + write); bf16 GEMM 8192^3 %.0f TFLOP/s\n",
              prop.name, prop.multiProcessorCount, ceil.bandwidth * 1e-12, ceil.bf16_rate * 1e-12);
  std::vector<RoofRow> roof_rows;
  if (o.roof || o.roofline_only)
    for (const std::string& name : o.models)
      if (shape_named(name).config_json == nullptr) roofline(shape_named(name), ops, roof_rows);  // GQA linears only
  if (o.roofline_only) o.models.clear();
  std::vector<Row> rows;
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_prefill = *std::max_element(o.prefills.begin(), o.prefills.end());
  const std::vector<RetrofitVariant> variants = retrofit_variants(o.retrofits, o.geometry);
  for (const std::string& name : o.models) {
    const Shape& s = shape_named(name);
    for (const RetrofitVariant& retrofit : variants) {
      const bool retrofitted = retrofit.mla_lite() || retrofit.dsa_lite();
      if (retrofitted && (s.moe() || s.config_json != nullptr)) continue;  // retrofits fit GQA models only
      model::RankBackends ranks;
      if (o.tensor_parallel > 1) {
        auto made = make_cuda_ranks(ops, o.tensor_parallel);
        if (!made.ok()) {
          std::fprintf(stderr, "drift_bench_decode: %s\n", made.status().to_string().c_str());
          return 1;
        }
        ranks = std::move(made).value();
        print_all_reduce(s, ranks, o.batches);
      }
      ModelBench b(s, ops, ceil, o.prompt, o.gen, max_batch, max_prefill, o.loader == "fast", std::move(ranks),
                   o.expert_parallel, retrofit, o.kv_cache_dtype == "fp8" ? DType::kF8E4M3 : DType::kBF16);
      b.set_profile_prefill(o.profile_prefill);
      bench_model(b, s, o, ops, rows);
      format_table(prop, ceil, o, rows, roof_rows);  // written after each model: a run cut short keeps it
      std::fflush(stdout);
    }
    std::filesystem::remove_all(bench_dir(s));  // the variants' shared checkpoint and their retrofit file
    std::filesystem::remove(bench_dir(s) + "-retrofit.safetensors");
  }
  std::printf("\n%s", format_table(prop, ceil, o, rows, roof_rows).c_str());
  return 0;
}

}  // namespace
}  // namespace drift::bench

int main(int argc, char** argv) { return drift::bench::run(argc, argv); }
