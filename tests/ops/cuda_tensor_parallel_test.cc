// Tensor parallelism on GPUs over NCCL: the collectives on two GPUs, and fixture models split over two
// GPUs against the same model on one. Skipped with fewer than two GPUs or a build without NCCL.
//
// Tolerance: a row split rounds each rank's partial sums to bf16 before the all-reduce adds them, where
// one rank rounds the whole sum once; over a fixture's layers that moves logits by well under the ~3% of
// the largest logit that bf16 against fp32 gives (cuda_golden_test), which kTolerance states.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "backend/comm/rank_threads.h"
#include "backend/cuda/cuda_ops.h"
#include "engine/backend_factory.h"
#include "model/registry.h"
#include "model/tensor_parallel_model.h"
#include "runner/model_runner.h"

namespace drift::testing {
namespace {

constexpr double kTolerance = 3e-2;

bool skip_reason(std::string& why) {
#ifndef DRIFT_HAVE_NCCL
  why = "this build has no NCCL";
  return true;
#endif
  const int gpus = backend::cuda_device_count();
  if (gpus >= 2) return false;
  why = "tensor parallelism needs 2 CUDA devices; " + std::to_string(gpus) + " found";
  return true;
}

TEST(CudaTensorParallel, NcclCollectivesOnTwoGpus) {
  if (std::string why; skip_reason(why)) GTEST_SKIP() << why;
  auto group = engine::make_rank_backends("cuda", 2);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  std::vector<backend::Ops*> ops = {group->first.ops.get(), group->others[0].get()};
  std::vector<std::vector<float>> sums(2), cols(2), roots(2);
  backend::RankThreads threads(2, nullptr);
  const Status s = threads.run([&](int32_t r) {
    backend::Ops& o = *ops[size_t(r)];
    o.bind_thread();
    backend::Buffer x = o.alloc(DType::kF32, {2, 3}), gathered = o.alloc(DType::kF32, {2, 6});
    std::vector<float> mine(6);
    std::iota(mine.begin(), mine.end(), float(10 * r));
    o.copy_from_host(x.view, mine.data());
    o.all_gather(x.view, gathered.view);
    o.all_reduce(x.view);
    sums[size_t(r)].resize(6);
    cols[size_t(r)].resize(12);
    o.copy_to_host(sums[size_t(r)].data(), x.view);
    o.copy_to_host(cols[size_t(r)].data(), gathered.view);
    o.copy_from_host(x.view, mine.data());
    o.broadcast(x.view, 1);
    roots[size_t(r)].resize(6);
    o.copy_to_host(roots[size_t(r)].data(), x.view);
    o.synchronize();
    return o.communicator()->status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(sums[size_t(r)], (std::vector<float>{10, 12, 14, 16, 18, 20}));
    EXPECT_EQ(cols[size_t(r)], (std::vector<float>{0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15}));
    EXPECT_EQ(roots[size_t(r)], (std::vector<float>{10, 11, 12, 13, 14, 15}));
  }
}

// Prefill logits [prompt, vocab] of a fixture split over `world` GPUs (1: one GPU, no communicator).
Expected<std::vector<float>> prefill_logits(const std::string& fixture, int32_t world, const std::vector<int32_t>& ids) {
  const std::string dir = std::string(DRIFT_FIXTURES_DIR) + "/models/" + fixture;
  DRIFT_ASSIGN_OR_RETURN(engine::RankGroup group, engine::make_rank_backends("cuda", world));
  std::unique_ptr<backend::Ops> first = std::move(group.first.ops);
  std::unique_ptr<model::Model> model;
  if (world == 1) {
    DRIFT_ASSIGN_OR_RETURN(model, model::load_model(dir, *first));
  } else {
    DRIFT_ASSIGN_OR_RETURN(model, model::load_tensor_parallel(dir, {first.get(), std::move(group.others)}, {}));
  }
  runner::RunnerConfig rc;
  rc.num_blocks.assign(model->kv_specs(DType::kBF16).size(), 16);
  rc.max_num_tokens = 256;
  rc.max_num_seqs = 4;
  rc.max_model_len = 256;
  rc.cuda_graphs = false;
  runner::ModelRunner runner(*model, *first, rc);
  std::vector<int32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), 0);
  const std::vector<std::vector<int32_t>> tables(size_t(rc.num_kv_groups()), blocks);
  runner::SeqStep step{ids, 0, int32_t(ids.size()), tables, false, true};
  DRIFT_ASSIGN_OR_RETURN(std::span<const float> logits, runner.step({&step, 1}));
  return std::vector<float>(logits.begin(), logits.end());
}

class CudaTensorParallelFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTensorParallelFixture, TwoGpusGiveOneGpusLogits) {
  if (std::string why; skip_reason(why)) GTEST_SKIP() << why;
  const std::vector<int32_t> ids = {1, 17, 250, 3, 99, 512, 7, 64, 300, 21, 5, 640};
  auto one = prefill_logits(GetParam(), 1, ids);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto two = prefill_logits(GetParam(), 2, ids);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  ASSERT_EQ(two->size(), one->size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < one->size(); ++i) {
    diff = std::max(diff, std::fabs(double((*two)[i]) - double((*one)[i])));
    ref = std::max(ref, std::fabs(double((*one)[i])));
  }
  std::printf("[ tp       ] %s: 2 GPUs within %.2e of one GPU's largest logit\n", GetParam().c_str(), diff / ref);
  EXPECT_LE(diff / ref, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallelFixture,
                         ::testing::Values("llama", "llama-bias", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3", "youtu"),
                         [](const auto& test) {
                           std::string n = test.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace drift::testing
