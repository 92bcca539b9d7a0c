// Block-scaled FP8 weights (quantization_config.quant_method "fp8" with weight_block_size: DeepSeek-V3's
// and Qwen3-FP8's checkpoints): every projection of a fixture rewritten as F8E4M3 codes with their
// "_scale_inv" tiles must load as the values code * scale stand for — the same logits, bit for bit, as
// the fixture with those values written out in fp32 — and stay near transformers' goldens (the codes'
// rounding only; DeepSeek-V3's router near-ties excepted). Tiles of 16 x 24 cross the fixtures' widths
// unevenly. An FP8 weight without its scales, or with scales of another tile size than the config's, is
// refused by name: its codes alone are not its values.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "fixture_model.h"
#include "model/registry.h"
#include "model_copy.h"
#include "weights/safetensors.h"

namespace drift::testing {
namespace {

constexpr int64_t kBlockRows = 16, kBlockCols = 24;

bool projection(const std::string& name) { return name.ends_with("proj.weight"); }

std::string fp8_copy(const std::string& fixture, bool decoded) {
  JsonPatches patches;
  if (!decoded)
    patches["config.json"] = {{"quantization_config",
                               {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {kBlockRows, kBlockCols}}}}};
  const std::string dir = copy_model(fixture_dir(fixture), {}, patches);
  quantize_fp8_blocks(dir, projection, kBlockRows, kBlockCols, decoded);
  return dir;
}

std::vector<float> prompt_logits(FixtureModel& f, const GoldenPrompt& p) {
  std::vector<int32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), 0);
  const std::vector<std::vector<int32_t>> tables(size_t(f.runner->config().num_kv_groups()), blocks);
  runner::SeqStep step{p.ids, 0, int32_t(p.ids.size()), tables, false, true};
  auto logits = f.runner->step({&step, 1});
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>{};
}

class Fp8WeightsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8WeightsTest, LoadAsTheValuesTheirScalesGive) {
  FixtureModel fp8 = load_fixture_dir(fp8_copy(GetParam(), false));
  FixtureModel decoded = load_fixture_dir(fp8_copy(GetParam(), true));
  ASSERT_TRUE(fp8.runner && decoded.runner);
  EXPECT_EQ(fp8.model->num_parameters(), decoded.model->num_parameters()) << "the scales are not parameters";
  for (const GoldenPrompt& p : fp8.prompts) {
    const std::vector<float> got = prompt_logits(fp8, p), want = prompt_logits(decoded, p);
    ASSERT_EQ(got.size(), p.logits.size());
    EXPECT_EQ(got, want) << "prompt of " << p.ids.size() << " tokens";
    // e4m3 keeps 3 mantissa bits of every weight, and the random-weight fixtures have no dominant features:
    // measured 6-19% of the largest golden logit over the dense fixtures (the codes read without their
    // scales: 112-148%). DeepSeek-V3's routing near-ties flip under the rounding (up to 105%), so it is held
    // to the exact equality above only.
    const double error = relative_max_error(got.data(), p.logits.data(), got.size());
    if (GetParam() != "deepseek_v3") {
      EXPECT_LE(error, 0.25) << "prompt of " << p.ids.size() << " tokens";
    }
    EXPECT_GT(error, 1e-4) << "FP8 codes round the weights: the logits cannot stay exact";
    std::printf("[ fp8 w    ] %s prompt %zu tokens: max error %.2e of the largest logit\n", GetParam().c_str(),
                p.ids.size(), error);
  }
}

TEST_P(Fp8WeightsTest, RefusesCodesWithoutTheirScales) {
  const std::string dir = fp8_copy(GetParam(), false);
  // The folder again without its first scale tensor.
  std::string dropped;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors" || entry.path().filename() == "golden.safetensors") continue;
    std::vector<weights::TensorToWrite> kept;
    {
      auto f = weights::SafetensorsFile::open(entry.path().string());
      ASSERT_TRUE(f.ok());
      for (const std::string& name : f->names()) {
        const weights::TensorInfo* t = f->find(name);
        if (dropped.empty() && name.ends_with("_scale_inv")) {
          dropped = name;
          continue;
        }
        kept.emplace_back(name, t->dtype, t->shape, std::vector<std::byte>(t->bytes.begin(), t->bytes.end()));
      }
    }
    ASSERT_TRUE(weights::write_safetensors(entry.path().string(), kept).ok());
  }
  ASSERT_FALSE(dropped.empty());
  auto ops = backend::make_cpu_ops();
  auto model = model::load_model(dir, *ops, {});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(dropped), std::string::npos) << model.status().to_string();
}

TEST_P(Fp8WeightsTest, RefusesScalesOfAnotherTileSize) {
  const std::string dir = fp8_copy(GetParam(), false);
  // The config now claims 8 x 8 tiles: every weight's scales have the shape of 16 x 24 ones.
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["quantization_config"]["weight_block_size"] = {8, 8};
  std::ofstream(dir + "/config.json") << config.dump(2);
  auto ops = backend::make_cpu_ops();
  auto model = model::load_model(dir, *ops, {});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("_scale_inv"), std::string::npos) << model.status().to_string();
  EXPECT_NE(model.status().message().find("expected"), std::string::npos) << model.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8WeightsTest, ::testing::Values("llama", "qwen3", "deepseek_v2", "deepseek_v3"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace drift::testing
