// Row-wise CUDA ops against the CPU backend on random bf16-exact inputs, at several shapes (batch 1,
// odd lengths, rows that are not multiples of 8 elements). Tolerances, as relative L2 error:
//   copies (embedding, gather_rows, write_kv, concat): exact;
//   ops with a bf16 result computed in fp32 (norms, rope, silu_mul, add): 4e-3, about twice what one
//   rounding of the output to bf16 (8 significant bits) gives.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "op_test_util.h"

namespace drift::testing {
namespace {

constexpr double kBf16Out = 4e-3;

using ElementwiseTest = CudaOpsTest;

TEST_F(ElementwiseTest, EmbeddingCopiesRows) {
  for (auto [tokens, vocab, hidden] : {std::array<int64_t, 3>{1, 37, 64}, {13, 1000, 2048}, {5, 50, 20}}) {
    const auto table = random_values(vocab * hidden);
    const auto ids = random_ints(tokens, 0, int32_t(vocab));
    auto c_table = cpu_f32(table, {vocab, hidden});
    auto c_ids = cpu_i32(ids, {tokens});
    auto c_out = cpu_->alloc(DType::kF32, {tokens, hidden});
    cpu_->embedding(c_ids.view, c_table.view, c_out.view);
    auto g_table = gpu_bf16(table, {vocab, hidden});
    auto g_ids = gpu_i32(ids, {tokens});
    auto g_out = gpu_poisoned(DType::kBF16, {tokens, hidden});
    gpu_->embedding(g_ids.view, g_table.view, g_out.view);
    EXPECT_EQ(read_gpu(g_out.view), read_cpu(c_out.view)) << tokens << "x" << hidden;
  }
}

// A rank's vocabulary slice: ids of its rows copy them, every other id gives a zero row.
TEST_F(ElementwiseTest, EmbeddingPartCopiesTheRanksRowsAndZeroesTheRest) {
  const int64_t tokens = 9, rows = 40, hidden = 24, first = 40;
  const auto table = random_values(rows * hidden);
  const auto ids = random_ints(tokens, 0, 120);
  auto c_table = cpu_f32(table, {rows, hidden});
  auto c_ids = cpu_i32(ids, {tokens});
  auto c_out = cpu_->alloc(DType::kF32, {tokens, hidden});
  cpu_->embedding_part(c_ids.view, c_table.view, first, c_out.view);
  auto g_table = gpu_bf16(table, {rows, hidden});
  auto g_ids = gpu_i32(ids, {tokens});
  auto g_out = gpu_poisoned(DType::kBF16, {tokens, hidden});
  gpu_->embedding_part(g_ids.view, g_table.view, first, g_out.view);
  const std::vector<float> cpu = read_cpu(c_out.view);
  EXPECT_EQ(read_gpu(g_out.view), cpu);
  for (int64_t t = 0; t < tokens; ++t) {
    const bool mine = ids[size_t(t)] >= first && ids[size_t(t)] < first + rows;
    EXPECT_EQ(cpu[size_t(t * hidden)] == 0.0f, !mine) << "token " << t << " id " << ids[size_t(t)];
  }
}

TEST_F(ElementwiseTest, RmsNormMatchesCpu) {
  // Rows held in registers (1032 .. 8192: one, two or four vectors of 8 a thread, tails included), rows
  // past that (12288: two passes), and warp rows (<= 1024).
  for (auto [rows, hidden] : {std::array<int64_t, 2>{1, 2048}, {17, 4096}, {33, 128}, {5, 20}, {3, 1000}, {2, 1032},
                              {1, 2880}, {3, 5120}, {2, 8192}, {2, 12288}}) {
    const auto x = random_values(rows * hidden, 3.0f);
    const auto w = random_values(hidden);
    auto c_x = cpu_f32(x, {rows, hidden});
    auto c_w = cpu_f32(w, {hidden});
    auto c_out = cpu_->alloc(DType::kF32, {rows, hidden});
    cpu_->rms_norm(c_x.view, c_w.view, 1e-5f, c_out.view);
    auto g_x = gpu_bf16(x, {rows, hidden});
    auto g_w = gpu_bf16(w, {hidden});
    auto g_out = gpu_poisoned(DType::kBF16, {rows, hidden});
    gpu_->rms_norm(g_x.view, g_w.view, 1e-5f, g_out.view);
    EXPECT_CLOSE(read_gpu(g_out.view), read_cpu(c_out.view), kBf16Out);
    // In place, as the per-head q/k norms run.
    gpu_->rms_norm(g_x.view, g_w.view, 1e-5f, g_x.view);
    EXPECT_CLOSE(read_gpu(g_x.view), read_cpu(c_out.view), kBf16Out);
  }
}

TEST_F(ElementwiseTest, AddRmsNormUpdatesResidualAndNormalises) {
  for (auto [rows, hidden] : {std::array<int64_t, 2>{1, 2048}, {9, 4096}, {7, 64}, {4, 20}, {1, 2880}, {2, 8192}, {2, 12288}}) {
    const auto res = random_values(rows * hidden, 2.0f);
    const auto x = random_values(rows * hidden);
    const auto w = random_values(hidden);
    auto c_res = cpu_f32(res, {rows, hidden});
    auto c_x = cpu_f32(x, {rows, hidden});
    auto c_w = cpu_f32(w, {hidden});
    auto c_out = cpu_->alloc(DType::kF32, {rows, hidden});
    cpu_->add_rms_norm(c_res.view, c_x.view, c_w.view, 1e-6f, c_out.view);
    auto g_res = gpu_bf16(res, {rows, hidden});
    auto g_x = gpu_bf16(x, {rows, hidden});
    auto g_w = gpu_bf16(w, {hidden});
    auto g_out = gpu_poisoned(DType::kBF16, {rows, hidden});
    gpu_->add_rms_norm(g_res.view, g_x.view, g_w.view, 1e-6f, g_out.view);
    EXPECT_CLOSE(read_gpu(g_res.view), read_cpu(c_res.view), kBf16Out) << "residual " << rows << "x" << hidden;
    EXPECT_CLOSE(read_gpu(g_out.view), read_cpu(c_out.view), kBf16Out) << "out " << rows << "x" << hidden;
  }
}

// The diagnostic switch drift_bench_decode's --omit-families uses: an omitted family queues nothing (its
// outputs keep what they held), the others run as before.
TEST_F(ElementwiseTest, OmittedFamiliesQueueNothing) {
  const int64_t rows = 3, hidden = 64;
  const auto res = random_values(rows * hidden, 2.0f), x = random_values(rows * hidden), w = random_values(hidden);
  auto omitting = backend::make_cuda_ops({.omitted_families = uint32_t(backend::OpFamily::kNorms)});
  ASSERT_TRUE(omitting.ok());
  backend::Ops& ops = **omitting;
  auto g_res = gpu_bf16(res, {rows, hidden});
  auto g_x = gpu_bf16(x, {rows, hidden});
  auto g_w = gpu_bf16(w, {hidden});
  // Finite values, not the NaN poison: NaN never compares equal to itself.
  auto g_out = gpu_bf16(random_values(rows * hidden), {rows, hidden});
  gpu_->synchronize();
  const std::vector<float> res_before = read_gpu(g_res.view), out_before = read_gpu(g_out.view);
  ops.add_rms_norm(g_res.view, g_x.view, g_w.view, 1e-6f, g_out.view);
  ops.rms_norm(g_x.view, g_w.view, 1e-6f, g_out.view);
  ops.synchronize();
  EXPECT_EQ(read_gpu(g_res.view), res_before);
  EXPECT_EQ(read_gpu(g_out.view), out_before);
  ops.add(g_x.view, g_x.view, g_out.view);
  ops.synchronize();
  EXPECT_NE(read_gpu(g_out.view), out_before) << "a family not omitted still runs";
}

struct RopeCase {
  int64_t tokens, q_heads, k_heads, head_dim;
  int32_t rotary_dim;
  bool interleaved;
};

TEST_F(ElementwiseTest, RopeMatchesCpu) {
  const int64_t max_positions = 300;
  for (const RopeCase& c : {RopeCase{1, 32, 8, 64, 64, false}, RopeCase{13, 4, 2, 16, 16, true},
                            RopeCase{7, 6, 2, 64, 32, false}, RopeCase{5, 4, 0, 32, 32, false},
                            RopeCase{9, 8, 8, 128, 128, true}}) {
    // A real table: theta 10000 frequencies over the rotary dimensions.
    std::vector<float> table(static_cast<size_t>(max_positions * c.rotary_dim));
    const int half = c.rotary_dim / 2;
    for (int64_t p = 0; p < max_positions; ++p)
      for (int i = 0; i < half; ++i) {
        const double angle = double(p) * std::pow(10000.0, -2.0 * i / c.rotary_dim);
        table[size_t(p * c.rotary_dim + i)] = float(std::cos(angle));
        table[size_t(p * c.rotary_dim + half + i)] = float(std::sin(angle));
      }
    const auto q = random_values(c.tokens * c.q_heads * c.head_dim);
    const auto k = random_values(c.tokens * c.k_heads * c.head_dim);
    const auto positions = random_ints(c.tokens, 0, int32_t(max_positions));
    auto c_q = cpu_f32(q, {c.tokens, c.q_heads, c.head_dim});
    auto c_k = cpu_f32(k, {c.tokens, c.k_heads, c.head_dim});
    auto c_pos = cpu_i32(positions, {c.tokens});
    auto c_table = cpu_f32(table, {max_positions, c.rotary_dim});
    cpu_->rope(c_q.view, c.k_heads > 0 ? c_k.view : Tensor(), c_pos.view, {c_table.view, c.rotary_dim, c.interleaved});
    auto g_q = gpu_bf16(q, {c.tokens, c.q_heads, c.head_dim});
    auto g_k = gpu_bf16(k, {c.tokens, c.k_heads, c.head_dim});
    auto g_pos = gpu_i32(positions, {c.tokens});
    auto g_table = gpu_f32(table, {max_positions, c.rotary_dim});
    gpu_->rope(g_q.view, c.k_heads > 0 ? g_k.view : Tensor(), g_pos.view, {g_table.view, c.rotary_dim, c.interleaved});
    EXPECT_CLOSE(read_gpu(g_q.view), read_cpu(c_q.view), kBf16Out) << "q, head_dim " << c.head_dim;
    if (c.k_heads > 0) {
      EXPECT_CLOSE(read_gpu(g_k.view), read_cpu(c_k.view), kBf16Out) << "k, head_dim " << c.head_dim;
    }
  }
}

TEST_F(ElementwiseTest, SiluMulMatchesCpu) {
  for (auto [rows, ffn] : {std::array<int64_t, 2>{1, 8192}, {7, 96}, {3, 20}, {33, 1408}}) {
    const auto gate_up = random_values(rows * 2 * ffn, 2.0f);
    auto c_in = cpu_f32(gate_up, {rows, 2 * ffn});
    auto c_out = cpu_->alloc(DType::kF32, {rows, ffn});
    cpu_->silu_mul(c_in.view, c_out.view);
    auto g_in = gpu_bf16(gate_up, {rows, 2 * ffn});
    auto g_out = gpu_poisoned(DType::kBF16, {rows, ffn});
    gpu_->silu_mul(g_in.view, g_out.view);
    EXPECT_CLOSE(read_gpu(g_out.view), read_cpu(c_out.view), kBf16Out) << rows << "x" << ffn;
  }
}

TEST_F(ElementwiseTest, GatherRowsCopiesRows) {
  for (auto [n, hidden, m] : {std::array<int64_t, 3>{13, 2048, 5}, {9, 20, 4}, {1, 64, 1}}) {
    const auto x = random_values(n * hidden);
    const auto rows = random_ints(m, 0, int32_t(n));
    auto c_x = cpu_f32(x, {n, hidden});
    auto c_rows = cpu_i32(rows, {m});
    auto c_out = cpu_->alloc(DType::kF32, {m, hidden});
    cpu_->gather_rows(c_x.view, c_rows.view, c_out.view);
    auto g_rows = gpu_i32(rows, {m});
    auto g_x = gpu_bf16(x, {n, hidden});
    auto g_out = gpu_poisoned(DType::kBF16, {m, hidden});
    gpu_->gather_rows(g_x.view, g_rows.view, g_out.view);
    EXPECT_EQ(read_gpu(g_out.view), read_cpu(c_out.view));
    // fp32 rows (logits) too.
    auto g_xf = gpu_f32(x, {n, hidden});
    auto g_outf = gpu_poisoned(DType::kF32, {m, hidden});
    gpu_->gather_rows(g_xf.view, g_rows.view, g_outf.view);
    EXPECT_EQ(read_gpu(g_outf.view), read_cpu(c_out.view));
  }
}

TEST_F(ElementwiseTest, AddMatchesCpu) {
  for (int64_t n : {1, 448, 4099}) {
    const auto a = random_values(n), b = random_values(n);
    auto c_a = cpu_f32(a, {n});
    auto c_b = cpu_f32(b, {n});
    auto c_out = cpu_->alloc(DType::kF32, {n});
    cpu_->add(c_a.view, c_b.view, c_out.view);
    auto g_a = gpu_bf16(a, {n});
    auto g_b = gpu_bf16(b, {n});
    auto g_out = gpu_poisoned(DType::kBF16, {n});
    gpu_->add(g_a.view, g_b.view, g_out.view);
    EXPECT_CLOSE(read_gpu(g_out.view), read_cpu(c_out.view), kBf16Out);
    auto g_af = gpu_f32(a, {n});
    auto g_bf = gpu_f32(b, {n});
    auto g_outf = gpu_poisoned(DType::kF32, {n});
    gpu_->add(g_af.view, g_bf.view, g_outf.view);
    EXPECT_EQ(read_gpu(g_outf.view), read_cpu(c_out.view));
  }
}

TEST_F(ElementwiseTest, WriteKvScattersRowsAndSkipsNegativeSlots) {
  const int64_t tokens = 11, blocks = 8, block_size = 16, kv_heads = 2, head_dim = 64;
  const int64_t slots = blocks * block_size;
  std::vector<int32_t> slot_list(static_cast<size_t>(slots));
  std::iota(slot_list.begin(), slot_list.end(), 0);
  std::shuffle(slot_list.begin(), slot_list.end(), rng_);
  std::vector<int32_t> slot_mapping(slot_list.begin(), slot_list.begin() + tokens);
  slot_mapping[3] = -1;
  slot_mapping[7] = -1;
  const auto k = random_values(tokens * kv_heads * head_dim), v = random_values(tokens * kv_heads * head_dim);
  const auto k_cache = random_values(slots * kv_heads * head_dim), v_cache = random_values(slots * kv_heads * head_dim);

  auto c_k = cpu_f32(k, {tokens, kv_heads, head_dim});
  auto c_v = cpu_f32(v, {tokens, kv_heads, head_dim});
  auto c_slots = cpu_i32(slot_mapping, {tokens});
  auto c_kc = cpu_f32(k_cache, {blocks, block_size, kv_heads, head_dim});
  auto c_vc = cpu_f32(v_cache, {blocks, block_size, kv_heads, head_dim});
  cpu_->write_kv(c_k.view, c_v.view, c_slots.view, c_kc.view, c_vc.view);
  auto g_k = gpu_bf16(k, {tokens, kv_heads, head_dim});
  auto g_v = gpu_bf16(v, {tokens, kv_heads, head_dim});
  auto g_slots = gpu_i32(slot_mapping, {tokens});
  auto g_kc = gpu_bf16(k_cache, {blocks, block_size, kv_heads, head_dim});
  auto g_vc = gpu_bf16(v_cache, {blocks, block_size, kv_heads, head_dim});
  gpu_->write_kv(g_k.view, g_v.view, g_slots.view, g_kc.view, g_vc.view);
  EXPECT_EQ(read_gpu(g_kc.view), read_cpu(c_kc.view));
  EXPECT_EQ(read_gpu(g_vc.view), read_cpu(c_vc.view));

  // A latent cache row (MLA): k only; 20 values per slot (bytes one at a time), 576 (DeepSeek: 16-byte units).
  for (int64_t width : {20, 576}) {
    const auto latent = random_values(tokens * width), latent_cache = random_values(slots * width);
    auto c_l = cpu_f32(latent, {tokens, 1, width});
    auto c_lc = cpu_f32(latent_cache, {blocks, block_size, 1, width});
    cpu_->write_kv(c_l.view, Tensor(), c_slots.view, c_lc.view, Tensor());
    auto g_l = gpu_bf16(latent, {tokens, 1, width});
    auto g_lc = gpu_bf16(latent_cache, {blocks, block_size, 1, width});
    gpu_->write_kv(g_l.view, Tensor(), g_slots.view, g_lc.view, Tensor());
    EXPECT_EQ(read_gpu(g_lc.view), read_cpu(c_lc.view)) << "latent width " << width;
  }
}

// MLA's kv_a rows [latent | roped key] written with the latent normalised on the way, against the CPU's
// write with the same norm, at DeepSeek's 512 + 64 and a narrow 16 + 4, from rows of a wider buffer (a row
// stride), into bf16 and FP8 caches.
TEST_F(ElementwiseTest, WriteKvNormalisesTheLatentAsItWrites) {
  const int64_t tokens = 7, blocks = 4, block_size = 16, slots = blocks * block_size;
  const std::vector<int32_t> slot_mapping = {5, 60, -1, 17, 0, 33, 48};
  for (auto [latent, rope] : {std::array<int64_t, 2>{512, 64}, {16, 4}}) {
    const int64_t width = latent + rope, stride = width + 8;
    const auto rows = random_values(tokens * stride, 3.0f), w = random_values(latent);
    const auto cache = random_values(slots * width);
    auto c_rows = cpu_f32(rows, {tokens, stride});
    auto c_w = cpu_f32(w, {latent});
    auto c_cache = cpu_f32(cache, {blocks, block_size, 1, width});
    auto c_slots = cpu_i32(slot_mapping, {tokens});
    cpu_->write_kv({.k = Tensor(c_rows.view.data, DType::kF32, {tokens, 1, width}), .slot_mapping = c_slots.view,
                    .k_cache = c_cache.view, .k_row_stride = stride, .k_norm_weight = c_w.view, .k_norm_eps = 1e-6f});
    auto g_rows = gpu_bf16(rows, {tokens, stride});
    auto g_w = gpu_bf16(w, {latent});
    auto g_cache = gpu_bf16(cache, {blocks, block_size, 1, width});
    auto g_slots = gpu_i32(slot_mapping, {tokens});
    const Tensor g_k(g_rows.view.data, DType::kBF16, {tokens, 1, width}, Device::kCuda);
    gpu_->write_kv({.k = g_k, .slot_mapping = g_slots.view, .k_cache = g_cache.view, .k_row_stride = stride,
                    .k_norm_weight = g_w.view, .k_norm_eps = 1e-6f});
    EXPECT_CLOSE(read_gpu(g_cache.view), read_cpu(c_cache.view), kBf16Out) << "latent " << latent;
    // FP8 codes with a scale per row: the GPU's rows decode to the CPU's normalised rows within e4m3's step.
    auto g_codes = gpu_->alloc(DType::kF8E4M3, {blocks, block_size, 1, width});
    auto g_scales = gpu_->alloc(DType::kF32, {blocks, block_size, 1});
    gpu_->write_kv({.k = g_k, .slot_mapping = g_slots.view, .k_cache = g_codes.view, .k_scale = g_scales.view,
                    .k_row_stride = stride, .k_norm_weight = g_w.view, .k_norm_eps = 1e-6f});
    const std::vector<float> scales = read_gpu(g_scales.view);
    std::vector<uint8_t> codes(size_t(slots * width));
    gpu_->copy_to_host(codes.data(), g_codes.view);
    gpu_->synchronize();
    const std::vector<float> expected = read_cpu(c_cache.view);
    for (int32_t slot : slot_mapping) {
      if (slot < 0) continue;
      const std::vector<float> want(expected.begin() + slot * width, expected.begin() + (slot + 1) * width);
      std::vector<float> got(want.size());
      for (int64_t d = 0; d < width; ++d) got[size_t(d)] = f8e4m3_to_f32(codes[size_t(slot * width + d)]) * scales[size_t(slot)];
      EXPECT_CLOSE(got, want, 0.05) << "FP8, latent " << latent << ", slot " << slot;
    }
  }
}

TEST_F(ElementwiseTest, RopeAndWriteKvReadFusedRows) {
  // Rows of a fused q/k/v projection, [T, (Hq + 2 Hk) * D]: rope rotates the q and k parts in place and
  // write_kv copies the k and v parts, both through row strides (also as the one op rope_write_kv). The CPU's strided result must equal its
  // packed one exactly, and the GPU's must match the CPU's as the packed ops do.
  const int64_t tokens = 9, hq = 8, hk = 2, d = 64, blocks = 4, block_size = 16, max_positions = 100;
  const int64_t stride = (hq + 2 * hk) * d;
  const std::vector<float> table = rope_table(max_positions, d);
  const auto fused = random_values(tokens * stride);
  const auto positions = random_ints(tokens, 0, int32_t(max_positions));
  std::vector<int32_t> slots = random_ints(tokens, 0, int32_t(blocks * block_size));
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  slots.resize(size_t(tokens), -1);  // duplicates dropped: those tokens skip the write
  const auto cache_init = random_values(blocks * block_size * hk * d);

  auto columns = [&](const Tensor& t, int64_t first, int64_t heads) {
    return Tensor(static_cast<char*>(t.data) + size_t(first) * dtype_size(t.dtype), t.dtype, {tokens, heads, d},
                  t.device);
  };
  struct Result {
    std::vector<float> rows, k_cache, v_cache;
  };
  auto run = [&](bool gpu, bool strided, bool fused_op = false) {
    backend::Ops& ops = gpu ? *gpu_ : *cpu_;
    auto up = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto rows = up(fused, {tokens, stride});
    auto kc = up(cache_init, {blocks, block_size, hk, d});
    auto vc = up(cache_init, {blocks, block_size, hk, d});
    auto pos = gpu ? gpu_i32(positions, {tokens}) : cpu_i32(positions, {tokens});
    auto slot = gpu ? gpu_i32(slots, {tokens}) : cpu_i32(slots, {tokens});
    auto tab = gpu ? gpu_f32(table, {max_positions, d}) : cpu_f32(table, {max_positions, d});
    backend::RopeParams rope{tab.view, int32_t(d), false};
    Result r;
    if (strided) {
      rope.q_row_stride = rope.k_row_stride = stride;
      const Tensor q = columns(rows.view, 0, hq), k = columns(rows.view, hq * d, hk), v = columns(rows.view, (hq + hk) * d, hk);
      const backend::WriteKvParams kv{.k = k, .v = v, .slot_mapping = slot.view, .k_cache = kc.view,
                                      .v_cache = vc.view, .k_row_stride = stride, .v_row_stride = stride};
      if (fused_op) {
        ops.rope_write_kv(q, pos.view, rope, kv);
      } else {
        ops.rope(q, k, pos.view, rope);
        ops.write_kv(kv);
      }
      r.rows = gpu ? read_gpu(rows.view) : read_cpu(rows.view);
    } else {
      // The packed reference: q, k and v copied apart first, then written back into fused rows to compare.
      std::vector<float> q(size_t(tokens * hq * d)), k(size_t(tokens * hk * d)), v(size_t(tokens * hk * d));
      for (int64_t t = 0; t < tokens; ++t) {
        std::copy_n(fused.begin() + t * stride, hq * d, q.begin() + t * hq * d);
        std::copy_n(fused.begin() + t * stride + hq * d, hk * d, k.begin() + t * hk * d);
        std::copy_n(fused.begin() + t * stride + (hq + hk) * d, hk * d, v.begin() + t * hk * d);
      }
      auto qb = up(q, {tokens, hq, d}), kb = up(k, {tokens, hk, d}), vb = up(v, {tokens, hk, d});
      ops.rope(qb.view, kb.view, pos.view, rope);
      ops.write_kv(kb.view, vb.view, slot.view, kc.view, vc.view);
      const auto qo = gpu ? read_gpu(qb.view) : read_cpu(qb.view);
      const auto ko = gpu ? read_gpu(kb.view) : read_cpu(kb.view);
      r.rows = fused;
      for (int64_t t = 0; t < tokens; ++t) {
        std::copy_n(qo.begin() + t * hq * d, hq * d, r.rows.begin() + t * stride);
        std::copy_n(ko.begin() + t * hk * d, hk * d, r.rows.begin() + t * stride + hq * d);
      }
    }
    r.k_cache = gpu ? read_gpu(kc.view) : read_cpu(kc.view);
    r.v_cache = gpu ? read_gpu(vc.view) : read_cpu(vc.view);
    return r;
  };
  const Result cpu_packed = run(false, false), cpu_strided = run(false, true), gpu_strided = run(true, true);
  EXPECT_EQ(cpu_strided.rows, cpu_packed.rows);
  EXPECT_EQ(cpu_strided.k_cache, cpu_packed.k_cache);
  EXPECT_EQ(cpu_strided.v_cache, cpu_packed.v_cache);
  EXPECT_CLOSE(gpu_strided.rows, cpu_strided.rows, kBf16Out);
  EXPECT_CLOSE(gpu_strided.k_cache, cpu_strided.k_cache, kBf16Out);
  EXPECT_EQ(gpu_strided.v_cache, cpu_strided.v_cache);
  // rope_write_kv: one kernel on the GPU, the same bits as the two ops.
  const Result gpu_fused = run(true, true, true), cpu_fused = run(false, true, true);
  EXPECT_EQ(gpu_fused.rows, gpu_strided.rows);
  EXPECT_EQ(gpu_fused.k_cache, gpu_strided.k_cache);
  EXPECT_EQ(gpu_fused.v_cache, gpu_strided.v_cache);
  EXPECT_EQ(cpu_fused.k_cache, cpu_strided.k_cache);
}

TEST_F(ElementwiseTest, ConcatJoinsRows) {
  for (auto [rows, a_cols, b_cols] : {std::array<int64_t, 3>{5, 64, 32}, {3, 20, 6}, {1, 512, 64}}) {
    const auto a = random_values(rows * a_cols), b = random_values(rows * b_cols);
    auto c_a = cpu_f32(a, {rows, a_cols});
    auto c_b = cpu_f32(b, {rows, b_cols});
    auto c_out = cpu_->alloc(DType::kF32, {rows, a_cols + b_cols});
    cpu_->concat(c_a.view, c_b.view, c_out.view);
    auto g_a = gpu_bf16(a, {rows, a_cols});
    auto g_b = gpu_bf16(b, {rows, b_cols});
    auto g_out = gpu_poisoned(DType::kBF16, {rows, a_cols + b_cols});
    gpu_->concat(g_a.view, g_b.view, g_out.view);
    EXPECT_EQ(read_gpu(g_out.view), read_cpu(c_out.view));
  }
}

}  // namespace
}  // namespace drift::testing
