// The EAGLE-3 head against PyTorch: tests/fixtures/models/eagle3_llama holds a head for the llama fixture
// (config.json + model.safetensors) and what the reference computed (tools/fixtures/make_fixtures.py):
// golden.json {prompt_ids (n), capture_layers (input-of-layer ids), expand_token} and golden.safetensors
// (fp32) features [n-1, 3Ht] (the target's captured states), fused [n-1, H], logits [n-1, Vd],
// prenorm [n-1, H], expand_logits [1, Vd]. Head row i (0..n-2) reads token prompt_ids[i+1] and hidden
// fused[i] at position i, causally; the extra row reads expand_token and hidden prenorm[n-2] at
// position n-1, seeing all n-1 rows before it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "fixture_model.h"
#include "model/arch/eagle3.h"
#include "model/registry.h"
#include "weights/safetensors.h"

namespace drift::testing {
namespace {

constexpr double kTolerance = 1e-4;

std::vector<float> golden_tensor(const weights::SafetensorsFile& file, const char* name, std::vector<int64_t> shape) {
  const weights::TensorInfo* t = file.find(name);
  EXPECT_NE(t, nullptr) << "golden.safetensors has no '" << name << "'";
  if (t == nullptr) return {};
  EXPECT_EQ(t->shape, shape) << name;
  std::vector<float> values(size_t(t->numel()));
  convert_to_f32(t->bytes.data(), t->dtype, values.data(), values.size());
  return values;
}

TEST(Eagle3Golden, HeadMatchesPyTorch) {
  const std::string dir = fixture_dir("eagle3_llama");
  ASSERT_TRUE(std::filesystem::exists(dir + "/golden.json"))
      << dir << " is missing: generate it with tools/fixtures/make_fixtures.py (needs PyTorch: the GPU machine)";
  auto ops = backend::make_cpu_ops();
  auto target = model::load_model(fixture_dir("llama"), *ops);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  std::ifstream in(dir + "/golden.json");
  const auto golden = nlohmann::json::parse(in);
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  const auto capture = golden["capture_layers"].get<std::vector<int32_t>>();
  const int32_t expand_token = golden["expand_token"].get<int32_t>();
  const int64_t n = int64_t(prompt.size()), rows = n - 1;
  ASSERT_GE(n, 2);

  auto head = model::load_eagle3_head(dir, **target, *ops);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  model::Eagle3Head& m = **head;
  EXPECT_EQ(m.eagle().capture_layers, capture);
  const int64_t h = m.config().hidden_size, ht = m.eagle().target_hidden, vd = m.vocab_size();
  auto file = weights::SafetensorsFile::open(dir + "/golden.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const auto features = golden_tensor(*file, "features", {rows, 3 * ht});
  const auto fused = golden_tensor(*file, "fused", {rows, h});
  const auto logits = golden_tensor(*file, "logits", {rows, vd});
  const auto prenorm = golden_tensor(*file, "prenorm", {rows, h});
  const auto expand_logits = golden_tensor(*file, "expand_logits", {1, vd});
  ASSERT_FALSE(HasFailure());

  // The target's captured states.
  ASSERT_TRUE((*target)->set_hidden_taps(capture).ok());
  runner::ModelRunner target_runner(**target, *ops, small_runner_config(16, 8, 128));
  const std::vector<std::vector<int32_t>> tables{{0, 1, 2, 3, 4, 5, 6, 7}};
  runner::SeqStep prefill{prompt, 0, int32_t(n), tables, true, false};
  ASSERT_TRUE(target_runner.step({&prefill, 1}).ok());
  const Tensor taps = (*target)->hidden_taps();
  std::vector<float> tapped;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      const float* row = taps.data_as<float>() + (j * taps.size(1) + i) * ht;  // CPU backend: host memory
      tapped.insert(tapped.end(), row, row + ht);
    }
  EXPECT_LE(relative_max_error(tapped.data(), features.data(), features.size()), kTolerance) << "features";

  // fc over them, then the head's rows.
  runner::ModelRunner head_runner(m, *ops, small_runner_config(16, 8, 128));
  std::vector<int32_t> row_ids(static_cast<size_t>(rows));
  std::iota(row_ids.begin(), row_ids.end(), 0);
  backend::Buffer device_rows = ops->alloc(DType::kI32, {rows});
  ops->copy_from_host(device_rows.view, row_ids.data());
  m.fuse_taps(taps, device_rows.view, m.input_hidden().slice(0, rows));
  const auto got_fused = read_rows(*ops, m.input_hidden(), 0, rows);
  EXPECT_LE(relative_max_error(got_fused.data(), fused.data(), fused.size()), kTolerance) << "fused";

  std::vector<int32_t> head_tokens(prompt.begin() + 1, prompt.end());
  runner::SeqStep chain{head_tokens, 0, int32_t(rows), tables, false, true};
  auto got_logits = head_runner.step({&chain, 1});
  ASSERT_TRUE(got_logits.ok()) << got_logits.status().to_string();
  EXPECT_LE(relative_max_error(got_logits->data(), logits.data(), logits.size()), kTolerance) << "logits";
  const auto got_prenorm = read_rows(*ops, m.output_hidden(), 0, rows);
  EXPECT_LE(relative_max_error(got_prenorm.data(), prenorm.data(), prenorm.size()), kTolerance) << "prenorm";

  // The expansion row: the last row's pre-norm output as its hidden, at position n - 1.
  const auto last = read_rows(*ops, m.output_hidden(), rows - 1, 1);
  ops->copy_from_host(m.input_hidden().slice(0, 1), last.data());
  head_tokens.push_back(expand_token);
  runner::SeqStep expand{head_tokens, int32_t(rows), 1, tables, true, false};
  auto got_expand = head_runner.step({&expand, 1});
  ASSERT_TRUE(got_expand.ok()) << got_expand.status().to_string();
  EXPECT_LE(relative_max_error(got_expand->data(), expand_logits.data(), expand_logits.size()), kTolerance)
      << "expand_logits";
}

}  // namespace
}  // namespace drift::testing
