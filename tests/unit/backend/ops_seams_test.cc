// The Ops seams every backend shares: a device copy, the collectives of a single rank (identity), and
// the support queries the loader asks (the CPU runs every layer kind, with an F32 or BF16 KV cache).
#include <gtest/gtest.h>

#include <numeric>

#include "backend/ops.h"

namespace drift::backend {
namespace {

std::vector<float> host(const Buffer& b) {
  return std::vector<float>(b.view.data_as<float>(), b.view.data_as<float>() + b.view.numel());
}

TEST(OpsSeams, CopyAndSingleRankCollectives) {
  auto ops = make_cpu_ops();
  EXPECT_EQ(ops->rank(), 0);
  EXPECT_EQ(ops->world_size(), 1);
  std::vector<float> values(12);
  std::iota(values.begin(), values.end(), 1.0f);
  Buffer x = ops->alloc(DType::kF32, {3, 4}), y = ops->alloc(DType::kF32, {3, 4});
  ops->copy_from_host(x.view, values.data());
  ops->copy(x.view, y.view);
  EXPECT_EQ(host(y), values);
  ops->all_reduce(x.view);  // one rank: the sum over ranks is x itself
  EXPECT_EQ(host(x), values);
  Buffer gathered = ops->alloc(DType::kF32, {3, 4});
  ops->all_gather(x.view, gathered.view);
  EXPECT_EQ(host(gathered), values);
}

TEST(OpsSeams, CpuSupportsEveryLayerKindWithF32Bf16OrFp8Kv) {
  auto ops = make_cpu_ops();
  AttentionShape mla{.num_heads = 16, .num_kv_heads = 1, .head_dim = 576, .head_dim_v = 512, .shared_kv = true};
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    mla.kv_dtype = kv;
    EXPECT_TRUE(ops->supports(mla).ok());
  }
  mla.kv_dtype = DType::kF16;
  const Status f16 = ops->supports(mla);
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(f16.message().find("F16"), std::string::npos) << f16.message();
  // DSA-lite's indexer and sparse attention read no FP8 cache.
  AttentionShape sparse{.num_heads = 8, .num_kv_heads = 2, .head_dim = 64, .head_dim_v = 64,
                        .kv_dtype = DType::kF8E4M3, .sparse_top_k = 64};
  const Status dsa = ops->supports(sparse);
  ASSERT_FALSE(dsa.ok());
  EXPECT_NE(dsa.message().find("DSA-lite"), std::string::npos) << dsa.message();
  EXPECT_TRUE(ops->supports(MoeShape{.hidden = 64, .ffn = 32, .num_experts = 8, .top_k = 2}).ok());
}

}  // namespace
}  // namespace drift::backend
