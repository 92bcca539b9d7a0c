// paged_attention over MLA's shared latent cache (DeepSeek-V2/V3, Youtu): v_cache undefined, one latent
// row of width D per token (num_kv_heads 1), V the first dv = out.size(2) features of each row. The CUDA
// kernels (ops/mla_attention_wgmma.cu on warpgroup MMA, the default where it takes the shape;
// ops/mla_attention_mma.cu on mma.sync; ops/mla_attention.cu on CUDA cores) against the CPU backend and
// against the brute-force reference of tests/support/attention_case.h (run with V = the K rows, then cut to
// dv). DeepSeek's real shape (D 576, dv 512, 16 and 128 heads) and the fixtures' small ones; decode
// (split-KV and its merge), several sequences of odd lengths, contexts crossing blocks, chunked prefill, a
// draft tree beside a chain, and a block-table view; each case over an FP8 latent (codes and a scale per
// row) against the CPU's FP8 run, and on mma.sync. Slots no query may read hold NaN and the output starts as
// NaN, so a wrong slot or an unwritten row fails. Tolerance 1e-2 relative L2 (bf16 inputs and output, fp32
// softmax).
#include <algorithm>
#include <cmath>
#include <ostream>

#include "attention_case.h"
#include "op_test_util.h"

namespace drift::testing {
namespace {

constexpr double kAttention = 1e-2;

struct MlaCase {
  std::string name;
  int64_t num_heads, width, dv, block_size;  // width: kv_lora_rank + rope dim; dv: kv_lora_rank
  std::vector<KeySeq> seqs;
  bool explicit_positions = false;
  float scale = 0.0f;  // 0: 1 / sqrt(width); larger: a sharper softmax
};

void PrintTo(const MlaCase& c, std::ostream* os) { *os << c.name; }

KeyCase key_case(const MlaCase& c) {
  return {.name = c.name, .head_dim = c.width, .num_heads = c.num_heads, .num_kv_heads = 1,
          .block_size = c.block_size, .seqs = c.seqs, .explicit_positions = c.explicit_positions};
}

class MlaAttentionTest : public CudaOpsTest, public ::testing::WithParamInterface<MlaCase> {
 protected:
  KeyInputs inputs(const MlaCase& c) {
    KeyInputs in = build_inputs(key_case(c), rng_);
    if (c.scale > 0.0f) in.scale = c.scale;
    return in;
  }
  backend::CudaOps& cuda() {
    auto* cuda = dynamic_cast<backend::CudaOps*>(gpu_.get());
    DRIFT_CHECK(cuda != nullptr, "the MLA tests' GPU backend is CudaOps");
    return *cuda;
  }

  // out [T, H, dv] of the op on `ops` (bf16 on the GPU, fp32 on the CPU), over `fp8`'s codes and scales
  // instead of the bf16 / fp32 latent where given.
  std::vector<float> run(backend::Ops& ops, bool gpu, const MlaCase& c, const KeyInputs& in,
                         const Fp8Cache* fp8 = nullptr) {
    const KeyCase kc = key_case(c);
    const int64_t t = in.num_tokens, h = c.num_heads;
    auto floats = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto ints = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_i32(v, shape) : cpu_i32(v, shape);
    };
    KeyBuffers b = upload_key_inputs(kc, in, floats, ints);  // its v_cache goes unused
    b.out = gpu ? gpu_poisoned(DType::kBF16, {t, h, c.dv}) : ops.alloc(DType::kF32, {t, h, c.dv});
    backend::PagedAttentionParams p = b.params(kc, in);
    p.v_cache = Tensor();  // the shared latent: V is the first dv features of each k_cache row
    backend::Buffer codes, scales;
    if (fp8 != nullptr) {
      codes = ops.alloc(DType::kF8E4M3, {in.num_blocks, c.block_size, 1, c.width});
      ops.copy_from_host(codes.view, fp8->codes.data());
      scales = gpu ? gpu_f32(fp8->scales, {in.num_blocks, c.block_size, 1})
                   : cpu_f32(fp8->scales, {in.num_blocks, c.block_size, 1});
      p.k_cache = codes.view;
      p.k_scale = scales.view;
    }
    ops.paged_attention(p);
    return gpu ? read_gpu(b.out.view) : read_cpu(b.out.view);
  }
};

// The definition's answer: attention with V = the K rows (width D), each head's output cut to dv.
std::vector<float> reference_mla(const MlaCase& c, KeyInputs in) {
  in.v_cache = in.k_cache;
  const std::vector<float> full = reference_attention(key_case(c), in);
  std::vector<float> out;
  for (size_t row = 0; row < full.size() / size_t(c.width); ++row)
    out.insert(out.end(), full.begin() + int64_t(row) * c.width, full.begin() + int64_t(row) * c.width + c.dv);
  return out;
}

TEST_P(MlaAttentionTest, MatchesCpuAndTheDefinition) {
  const MlaCase& c = GetParam();
  const KeyInputs in = inputs(c);
  const auto got = run(*gpu_, true, c, in);
  const auto want = run(*cpu_, false, c, in);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_CLOSE(got, want, kAttention) << c.name;
  EXPECT_CLOSE(want, reference_mla(c, in), 1e-5) << c.name << ": the CPU oracle itself";
  EXPECT_EQ(run(*gpu_, true, c, in), got) << c.name << ": the same launch twice gives other bits";
}

// An FP8 latent (e4m3 codes, a scale per row: --kv-cache-dtype fp8 on an MLA model): both CUDA kernels
// against the CPU over the same codes.
TEST_P(MlaAttentionTest, Fp8LatentMatchesCpuOnBothKernels) {
  const MlaCase& c = GetParam();
  const KeyInputs in = inputs(c);
  const Fp8Cache fp8 = quantize_fp8_cache(in.k_cache, c.width);
  const auto want = run(*cpu_, false, c, in, &fp8);
  const auto tensor_cores = run(*gpu_, true, c, in, &fp8);
  cuda().set_mla_tensor_cores(false);
  const auto cuda_cores = run(*gpu_, true, c, in, &fp8);
  cuda().set_mla_tensor_cores(true);
  EXPECT_CLOSE(tensor_cores, want, kAttention) << c.name << ": tensor cores";
  EXPECT_CLOSE(cuda_cores, want, kAttention) << c.name << ": CUDA cores";
}

// The same cases on the CUDA-core kernel (the tensor-core one takes DeepSeek's and drift-mla-14m's shapes
// above; the fixtures' narrow latents run on CUDA cores either way).
TEST_P(MlaAttentionTest, CudaCoreKernelMatchesCpu) {
  const MlaCase& c = GetParam();
  const KeyInputs in = inputs(c);
  const auto tensor_cores = run(*gpu_, true, c, in);
  cuda().set_mla_tensor_cores(false);
  const auto cuda_cores = run(*gpu_, true, c, in);
  cuda().set_mla_tensor_cores(true);
  EXPECT_CLOSE(cuda_cores, run(*cpu_, false, c, in), kAttention) << c.name;
  EXPECT_CLOSE(tensor_cores, cuda_cores, kAttention) << c.name << ": the two kernels";
}

// Under a cap on the key splits (CudaOptions::mla_max_splits, drift_bench_mla's knob): one split (no merge)
// and an odd count give the CPU's answer too.
TEST_P(MlaAttentionTest, SplitCapsMatchCpu) {
  const MlaCase& c = GetParam();
  const KeyInputs in = inputs(c);
  const auto want = run(*cpu_, false, c, in);
  for (const int32_t cap : {1, 3}) {
    cuda().set_mla_max_splits(cap);
    EXPECT_CLOSE(run(*gpu_, true, c, in), want, kAttention) << c.name << ": at most " << cap << " splits";
  }
  cuda().set_mla_max_splits(0);
}

// The mma.sync kernel (the default runs the warpgroup-MMA one, CudaOptions::mla_wgmma, wherever it takes the
// shape: bf16 latents of 128/384/512 values) on every case: the CPU's answer under the split rule and under
// caps of one split (no merge) and three, and the same bits twice.
TEST_P(MlaAttentionTest, MmaSyncKernelMatchesCpu) {
  const MlaCase& c = GetParam();
  const KeyInputs in = inputs(c);
  const auto want = run(*cpu_, false, c, in);
  cuda().set_mla_wgmma(false);
  const auto got = run(*gpu_, true, c, in), again = run(*gpu_, true, c, in);
  std::vector<std::vector<float>> capped;
  for (const int32_t cap : {1, 3}) {
    cuda().set_mla_max_splits(cap);
    capped.push_back(run(*gpu_, true, c, in));
  }
  cuda().set_mla_max_splits(0);
  cuda().set_mla_wgmma(backend::CudaOptions{}.mla_wgmma);
  EXPECT_CLOSE(got, want, kAttention) << c.name << ": mma.sync";
  EXPECT_EQ(again, got) << c.name << ": mma.sync, the same launch twice gives other bits";
  EXPECT_CLOSE(capped[0], want, kAttention) << c.name << ": mma.sync, one split";
  EXPECT_CLOSE(capped[1], want, kAttention) << c.name << ": mma.sync, at most three splits";
}

const std::vector<int32_t> kSmallTree{-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6};

INSTANTIATE_TEST_SUITE_P(
    Cases, MlaAttentionTest,
    ::testing::Values(
        // DeepSeek-V2/V3's latent: 512 + 64 wide, values the first 512. Decode at batch 1 splits the keys.
        MlaCase{"decode_b1_h16", 16, 576, 512, 16, {{700, 1}}},
        MlaCase{"decode_b1_h128", 128, 576, 512, 16, {{300, 1}}},
        MlaCase{"decode_b1_h16_sharp", 16, 576, 512, 16, {{513, 1}}, false, 0.15f},
        MlaCase{"decode_b1_h16_bs64", 16, 576, 512, 64, {{1000, 1}}},
        MlaCase{"decode_b1_h16_long", 16, 576, 512, 16, {{6000, 1}}},
        MlaCase{"decode_b5_odd_lengths", 16, 576, 512, 16, {{1, 1}, {17, 1}, {129, 1}, {500, 1}, {33, 1}}},
        MlaCase{"decode_b12_h128", 128, 576, 512, 16,
                {{301, 1}, {2, 1}, {45, 1}, {399, 1}, {16, 1}, {17, 1}, {250, 1}, {88, 1}, {9, 1}, {160, 1}, {33, 1}, {64, 1}}},
        MlaCase{"heads_not_a_multiple_of_16", 20, 576, 512, 16, {{90, 1}, {31, 3}}},
        // MLA-lite on the Llama-3.1-8B shape: 384 latent values and 8 KV heads' 16 kept RoPE features.
        MlaCase{"mla_lite_8b_decode", 32, 512, 384, 16, {{900, 1}, {70, 1}}},
        MlaCase{"mla_lite_8b_prefill", 32, 512, 384, 16, {{60, 21}}},
        // ... with one shared RoPE key of 16 frequencies (a 416-value row: the retrofit tool's form).
        MlaCase{"mla_lite_8b_shared_rope", 32, 416, 384, 16, {{700, 1}, {33, 1}, {90, 9}}},
        // Several query tokens per sequence: prefill, chunked prefill, mixed steps.
        MlaCase{"prefill_h16", 16, 576, 512, 16, {{45, 45}, {3, 3}}},
        MlaCase{"chunked_prefill_h16", 16, 576, 512, 16, {{300, 37}}},
        MlaCase{"mixed_h128", 128, 576, 512, 16, {{200, 1}, {40, 40}, {90, 5}}, true},
        // Draft trees (ancestor masks) beside chains, and block-table views.
        MlaCase{"tree_with_chain_h16", 16, 576, 512, 16, {{90, 12, kSmallTree}, {40, 1}}, true},
        MlaCase{"tree_two_words_h16", 16, 576, 512, 16, {{120, 45, random_tree(45, 7)}}, true},
        MlaCase{"view_decode_h16", 16, 576, 512, 16, {{200, 1, {}, {0, 3, 5, 12}}, {100, 1, {}, {1, 6}}}, true},
        MlaCase{"view_tree_h16", 16, 576, 512, 16, {{170, 12, kSmallTree, {0, 1, 4, 9, 10}}}, true},
        // The fixtures' shapes: DeepSeek-V2/V3 (32 + 8, 4 heads), Youtu (32 + 16), drift-mla-14m (128 + 16, 8 heads).
        MlaCase{"deepseek_fixture", 4, 40, 32, 16, {{37, 37}, {20, 1}, {70, 7}}},
        MlaCase{"deepseek_fixture_decode", 4, 40, 32, 16, {{150, 1}}},
        MlaCase{"youtu_fixture", 4, 48, 32, 16, {{50, 7}, {16, 16}}},
        MlaCase{"drift_mla_14m", 8, 144, 128, 16, {{100, 100}, {260, 1}}},
        MlaCase{"drift_mla_14m_tree", 8, 144, 128, 16, {{60, 12, kSmallTree}}, true}),
    [](const ::testing::TestParamInfo<MlaCase>& test) { return test.param.name; });

}  // namespace
}  // namespace drift::testing
