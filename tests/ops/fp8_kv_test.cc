// FP8 (e4m3 + a scale per (token, kv head) row) KV cache on CUDA against the CPU oracle:
// - write_kv: the same codes and scales, bit for bit (both quantize the same bf16-exact values by the rule
//   of base/dtype.h), through row strides and skipped slots; rope_write_kv (one kernel) gives the bits of
//   rope then write_kv on the GPU.
// - paged_attention over identical FP8 caches (the CPU's codes and scales uploaded): the decode (split-KV,
//   on tensor cores and on CUDA cores) and prefill (tensor-core) kernels against the CPU within 1e-2
//   relative L2, the bf16 cases' tolerance (bf16 output, bf16 softmax weights in P V, and the prefill
//   kernel's codes * scale rounded to bf16).
#include <algorithm>
#include <cmath>

#include "attention_case.h"
#include "op_test_util.h"

namespace drift::testing {
namespace {

constexpr double kAttention = 1e-2;

class Fp8KvTest : public CudaOpsTest {
 protected:
  backend::Buffer gpu_codes(const std::vector<uint8_t>& codes, std::initializer_list<int64_t> shape) {
    backend::Buffer b = gpu_->alloc(DType::kF8E4M3, shape);
    gpu_->copy_from_host(b.view, codes.data());
    return b;
  }
  std::vector<uint8_t> read_codes(backend::Ops& ops, const Tensor& t) {
    std::vector<uint8_t> out(t.nbytes());
    ops.copy_to_host(out.data(), t);
    ops.synchronize();
    return out;
  }
  std::vector<float> read_scales(backend::Ops& ops, const Tensor& t) {
    std::vector<float> out(size_t(t.numel()));
    ops.copy_to_host(out.data(), t);
    ops.synchronize();
    return out;
  }
};

TEST_F(Fp8KvTest, WriteKvGivesTheCpuCodesAndScales) {
  const int64_t tokens = 13, hk = 4, d = 128, blocks = 6, block_size = 16, stride = 3 * hk * d;
  const int64_t slots = blocks * block_size;
  std::vector<int32_t> slot_mapping = random_ints(tokens, 0, int32_t(slots));
  std::sort(slot_mapping.begin(), slot_mapping.end());
  slot_mapping.erase(std::unique(slot_mapping.begin(), slot_mapping.end()), slot_mapping.end());
  slot_mapping.resize(size_t(tokens), -1);
  std::vector<float> rows = random_values(tokens * stride, 2.0f);
  // Token 2's K head 0 is all zeros: scale 0 and zero codes on both backends.
  for (int64_t i = 0; i < d; ++i) rows[size_t(2 * stride + hk * d + i)] = 0.0f;

  struct Written {
    std::vector<uint8_t> k, v;
    std::vector<float> k_scale, v_scale;
  };
  auto run = [&](bool gpu) {
    backend::Ops& ops = gpu ? *gpu_ : *cpu_;
    auto src = gpu ? gpu_bf16(rows, {tokens, stride}) : cpu_f32(rows, {tokens, stride});
    auto slot = gpu ? gpu_i32(slot_mapping, {tokens}) : cpu_i32(slot_mapping, {tokens});
    auto kc = ops.alloc(DType::kF8E4M3, {blocks, block_size, hk, d}), vc = ops.alloc(DType::kF8E4M3, {blocks, block_size, hk, d});
    auto ks = ops.alloc(DType::kF32, {blocks, block_size, hk}), vs = ops.alloc(DType::kF32, {blocks, block_size, hk});
    const std::vector<uint8_t> code_init(size_t(slots * hk * d), 0x11);
    const std::vector<float> scale_init(size_t(slots * hk), -1.0f);
    for (const backend::Buffer* b : {&kc, &vc}) ops.copy_from_host(b->view, code_init.data());
    for (const backend::Buffer* b : {&ks, &vs}) ops.copy_from_host(b->view, scale_init.data());
    const size_t elem = dtype_size(src.view.dtype);
    const Tensor k(static_cast<char*>(src.view.data) + size_t(hk * d) * elem, src.view.dtype, {tokens, hk, d}, src.view.device);
    const Tensor v(static_cast<char*>(src.view.data) + size_t(2 * hk * d) * elem, src.view.dtype, {tokens, hk, d}, src.view.device);
    ops.write_kv({.k = k, .v = v, .slot_mapping = slot.view, .k_cache = kc.view, .v_cache = vc.view,
                  .k_scale = ks.view, .v_scale = vs.view, .k_row_stride = stride, .v_row_stride = stride});
    return Written{read_codes(ops, kc.view), read_codes(ops, vc.view), read_scales(ops, ks.view), read_scales(ops, vs.view)};
  };
  const Written cpu = run(false), gpu = run(true);
  EXPECT_EQ(gpu.k, cpu.k);
  EXPECT_EQ(gpu.v, cpu.v);
  EXPECT_EQ(gpu.k_scale, cpu.k_scale);
  EXPECT_EQ(gpu.v_scale, cpu.v_scale);
  EXPECT_NE(std::count(cpu.k_scale.begin(), cpu.k_scale.end(), -1.0f), int64_t(cpu.k_scale.size()));  // it wrote
}

TEST_F(Fp8KvTest, RopeWriteKvIsRopeThenWriteKv) {
  const int64_t tokens = 7, hq = 8, hk = 2, d = 64, blocks = 4, block_size = 16, max_positions = 64;
  const int64_t stride = (hq + 2 * hk) * d;
  const std::vector<float> table = rope_table(max_positions, d);
  const auto fused = random_values(tokens * stride);
  const auto positions = random_ints(tokens, 0, int32_t(max_positions));
  std::vector<int32_t> slots(static_cast<size_t>(tokens), 0);
  for (int64_t t = 0; t < tokens; ++t) slots[size_t(t)] = int32_t(t * 5) % int32_t(blocks * block_size);
  slots[3] = -1;
  auto run = [&](bool fused_op) {
    auto rows = gpu_bf16(fused, {tokens, stride});
    auto pos = gpu_i32(positions, {tokens});
    auto slot = gpu_i32(slots, {tokens});
    auto tab = gpu_f32(table, {max_positions, d});
    auto kc = gpu_codes(std::vector<uint8_t>(size_t(blocks * block_size * hk * d), 0), {blocks, block_size, hk, d});
    auto vc = gpu_codes(std::vector<uint8_t>(size_t(blocks * block_size * hk * d), 0), {blocks, block_size, hk, d});
    auto ks = gpu_f32(std::vector<float>(size_t(blocks * block_size * hk), 0.0f), {blocks, block_size, hk});
    auto vs = gpu_f32(std::vector<float>(size_t(blocks * block_size * hk), 0.0f), {blocks, block_size, hk});
    backend::RopeParams rope{tab.view, int32_t(d), false};
    rope.q_row_stride = rope.k_row_stride = stride;
    auto columns = [&](int64_t first, int64_t heads) {
      return Tensor(static_cast<char*>(rows.view.data) + size_t(first) * 2, DType::kBF16, {tokens, heads, d}, rows.view.device);
    };
    const Tensor q = columns(0, hq), k = columns(hq * d, hk), v = columns((hq + hk) * d, hk);
    const backend::WriteKvParams kv{.k = k, .v = v, .slot_mapping = slot.view, .k_cache = kc.view, .v_cache = vc.view,
                                    .k_scale = ks.view, .v_scale = vs.view, .k_row_stride = stride, .v_row_stride = stride};
    if (fused_op) {
      gpu_->rope_write_kv(q, pos.view, rope, kv);
    } else {
      gpu_->rope(q, k, pos.view, rope);
      gpu_->write_kv(kv);
    }
    return std::make_tuple(read_gpu(rows.view), read_codes(*gpu_, kc.view), read_codes(*gpu_, vc.view),
                           read_scales(*gpu_, ks.view), read_scales(*gpu_, vs.view));
  };
  EXPECT_EQ(run(true), run(false));
}

class Fp8AttentionTest : public Fp8KvTest, public ::testing::WithParamInterface<KeyCase> {
 protected:
  // The op over FP8 caches holding `k8` / `v8` (fp32 q and out on the CPU, bf16 on the GPU).
  std::vector<float> run(bool gpu, const KeyCase& c, const KeyInputs& in, const Fp8Cache& k8, const Fp8Cache& v8) {
    backend::Ops& ops = gpu ? *gpu_ : *cpu_;
    const int64_t t = in.num_tokens, h = c.num_heads, d = c.head_dim, hk = c.num_kv_heads;
    auto floats = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto ints = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_i32(v, shape) : cpu_i32(v, shape);
    };
    KeyBuffers b = upload_key_inputs(c, in, floats, ints);
    auto codes = [&](const std::vector<uint8_t>& v) {
      backend::Buffer buf = ops.alloc(DType::kF8E4M3, {in.num_blocks, c.block_size, hk, d});
      ops.copy_from_host(buf.view, v.data());
      return buf;
    };
    b.k_cache = codes(k8.codes);
    b.v_cache = codes(v8.codes);
    b.k_scale = gpu ? gpu_f32(k8.scales, {in.num_blocks, c.block_size, hk}) : cpu_f32(k8.scales, {in.num_blocks, c.block_size, hk});
    b.v_scale = gpu ? gpu_f32(v8.scales, {in.num_blocks, c.block_size, hk}) : cpu_f32(v8.scales, {in.num_blocks, c.block_size, hk});
    b.sinks = gpu ? gpu_f32(in.sinks, {h}) : cpu_f32(in.sinks, {h});
    b.out = gpu ? gpu_poisoned(DType::kBF16, {t, h, d}) : ops.alloc(DType::kF32, {t, h, d});
    ops.paged_attention(b.params(c, in));
    return gpu ? read_gpu(b.out.view) : read_cpu(b.out.view);
  }
};

TEST_P(Fp8AttentionTest, MatchesCpuOverTheSameCodes) {
  const KeyCase& c = GetParam();
  const KeyInputs in = build_inputs(c, rng_);
  const Fp8Cache k8 = quantize_fp8_cache(in.k_cache, c.head_dim), v8 = quantize_fp8_cache(in.v_cache, c.head_dim);
  const auto got = run(true, c, in, k8, v8);
  EXPECT_CLOSE(got, run(false, c, in, k8, v8), kAttention) << c.name;
  EXPECT_EQ(run(true, c, in, k8, v8), got) << c.name << ": the same launch twice gives other bits";
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp8AttentionTest, ::testing::ValuesIn(key_cases()),
                         [](const ::testing::TestParamInfo<KeyCase>& test) { return test.param.name; });

// Decode steps long enough to split across CTAs and warps, at the shapes the FP8 tensor-core kernel takes
// (head_dim 64 and 128, 96 zero-filled to 128; 1 to 8 query heads per kv head), with sinks, windows, trees
// and views; sequences of one, a few and many tiles side by side.
std::vector<KeyCase> fp8_decode_cases() {
  std::vector<KeyCase> cases;
  cases.push_back({.name = "llama8b_group4", .head_dim = 128, .num_heads = 16, .num_kv_heads = 4,
                   .seqs = {{2500, 1}, {17, 1}, {1000, 1}, {129, 1}}});
  cases.push_back({.name = "group8_dim64_sinks_window", .head_dim = 64, .num_heads = 16, .num_kv_heads = 2,
                   .seqs = {{900, 1}, {300, 1}}, .sliding_window = 128, .sinks = true});
  cases.push_back({.name = "group1_dim64", .head_dim = 64, .num_heads = 4, .num_kv_heads = 4, .seqs = {{1500, 1}, {3, 1}}});
  cases.push_back({.name = "group2_dim96", .head_dim = 96, .num_heads = 4, .num_kv_heads = 2, .seqs = {{700, 1}, {64, 1}}});
  cases.push_back({.name = "tree_dim128", .head_dim = 128, .num_heads = 8, .num_kv_heads = 2,
                   .seqs = {{1200, 12, {-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6}}, {400, 1}}});
  cases.push_back({.name = "view_dim128", .head_dim = 128, .num_heads = 8, .num_kv_heads = 2,
                   .seqs = {{1600, 1, {}, {0, 3, 5, 12, 40, 41, 42, 99}}, {500, 1}}});
  return cases;
}

class Fp8DecodeTest : public Fp8AttentionTest {};

// Both FP8 decode kernels against the CPU over the same codes, and the tensor-core kernel's bits the same
// from one launch to the next.
TEST_P(Fp8DecodeTest, TensorCoreAndCudaCoreKernelsMatchCpu) {
  const KeyCase& c = GetParam();
  auto* cuda = dynamic_cast<backend::CudaOps*>(gpu_.get());
  ASSERT_NE(cuda, nullptr);
  const KeyInputs in = build_inputs(c, rng_);
  const Fp8Cache k8 = quantize_fp8_cache(in.k_cache, c.head_dim), v8 = quantize_fp8_cache(in.v_cache, c.head_dim);
  const auto cpu = run(false, c, in, k8, v8);
  const auto tensor_cores = run(true, c, in, k8, v8);
  cuda->set_fp8_tensor_cores(false);
  const auto cuda_cores = run(true, c, in, k8, v8);
  cuda->set_fp8_tensor_cores(true);
  EXPECT_CLOSE(tensor_cores, cpu, kAttention) << c.name << ": tensor cores";
  EXPECT_CLOSE(cuda_cores, cpu, kAttention) << c.name << ": CUDA cores";
  EXPECT_EQ(run(true, c, in, k8, v8), tensor_cores) << c.name << ": the same launch twice gives other bits";
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp8DecodeTest, ::testing::ValuesIn(fp8_decode_cases()),
                         [](const ::testing::TestParamInfo<KeyCase>& test) { return test.param.name; });

}  // namespace
}  // namespace drift::testing
