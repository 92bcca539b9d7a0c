// GPT-OSS experts also ship as bf16 matrices (gate_up_proj [E, H, 2F], down_proj [E, F, H], x @ W layout)
// instead of MXFP4 blocks. This rewrites the MXFP4 fixture that way, with the same decoded values, and
// checks the model loaded from it still matches the transformers goldens; it also checks the fixture's
// two KV layer groups (sliding window 8 on even layers, full on odd ones).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "fixture_model.h"
#include "model/registry.h"
#include "weights/mxfp4.h"
#include "weights/safetensors.h"

namespace drift::testing {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "drift_gpt_oss_XXXXXX").string();
    EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::byte> bf16_bytes(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

// The fixture with every "<name>_blocks"/"<name>_scales" pair replaced by a bf16 "<name>" of shape
// [E, in, out] (the transpose of the [E, out, in] the blocks encode), and no quantization_config.
void write_bf16_copy(const std::string& from, const std::string& to) {
  std::ifstream in(from + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.erase("quantization_config");
  std::ofstream(to + "/config.json") << config.dump(2);
  fs::copy_file(from + "/generation_config.json", to + "/generation_config.json");

  auto file = weights::SafetensorsFile::open(from + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::vector<weights::TensorToWrite> tensors;
  for (const std::string& name : file->names()) {
    const weights::TensorInfo& t = *file->find(name);
    if (name.ends_with("_scales")) continue;
    if (!name.ends_with("_blocks")) {
      tensors.emplace_back(name, t.dtype, t.shape, std::vector<std::byte>(t.bytes.begin(), t.bytes.end()));
      continue;
    }
    const std::string base = name.substr(0, name.size() - std::string("_blocks").size());
    const int64_t experts = t.shape[0], out = t.shape[1], in_features = t.shape[2] * weights::kMxfp4BlockValues;
    auto dense =
        weights::dequantize_mxfp4(t, *file->find(base + "_scales"), std::vector<int64_t>{experts, out, in_features});
    ASSERT_TRUE(dense.ok()) << dense.status().to_string();
    std::vector<float> in_out(dense->size());
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in_features; ++i)
          in_out[size_t((e * in_features + i) * out + o)] = (*dense)[size_t((e * out + o) * in_features + i)];
    tensors.emplace_back(base, DType::kBF16, std::vector<int64_t>{experts, in_features, out}, bf16_bytes(in_out));
  }
  ASSERT_TRUE(weights::write_safetensors(to + "/model.safetensors", tensors, {{"format", "pt"}}).ok());
}

TEST(GptOss, KvGroupsSplitSlidingAndFullLayers) {
  FixtureModel f = load_fixture("gpt_oss");
  ASSERT_TRUE(f.model);
  const auto specs = f.model->kv_specs(DType::kBF16);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "sliding");
  EXPECT_EQ(specs[0].num_layers, 2);
  EXPECT_EQ(specs[0].sliding_window, 8);
  EXPECT_EQ(specs[1].name, "full");
  EXPECT_EQ(specs[1].num_layers, 1);
  EXPECT_EQ(specs[1].sliding_window, 0);
  EXPECT_EQ(f.model->kv_bytes_per_token(DType::kBF16), 3 * 2 * 2 * 16 * 2);  // layers * K,V * kv_heads * head_dim * 2 B
}

TEST(GptOss, Bf16ExpertsMatchTheMxfp4Goldens) {
  FixtureModel f = load_fixture("gpt_oss");
  ASSERT_FALSE(f.prompts.empty());
  TempDir dir;
  write_bf16_copy(f.dir, dir.path());
  if (HasFatalFailure()) return;

  auto ops = backend::make_cpu_ops();
  auto model = model::load_model(dir.path(), *ops);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE((*model)->config().quant_method.empty());
  runner::RunnerConfig rc;
  rc.block_size = 16;
  rc.num_blocks.assign((*model)->kv_specs(DType::kF32).size(), 16);
  rc.max_num_tokens = 256;
  rc.max_num_seqs = 4;
  rc.max_model_len = 256;
  runner::ModelRunner runner(**model, *ops, rc);
  std::vector<int32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), 0);
  const std::vector<std::vector<int32_t>> tables(size_t(rc.num_kv_groups()), blocks);
  for (const GoldenPrompt& p : f.prompts) {
    runner::SeqStep step{p.ids, 0, int32_t(p.ids.size()), tables, false, true};
    auto logits = runner.step({&step, 1});
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    ASSERT_EQ(logits->size(), p.logits.size());
    EXPECT_LE(relative_max_error(logits->data(), p.logits.data(), p.logits.size()), 1e-4)
        << "prompt of " << p.ids.size() << " tokens";
  }
}

}  // namespace
}  // namespace drift::testing
