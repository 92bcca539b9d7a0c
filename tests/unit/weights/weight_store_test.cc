#include "weights/weight_store.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "scratch_dir.h"

namespace drift::weights {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using testutil::ScratchDir;

std::string fixture(const char* model) { return std::string(DRIFT_FIXTURES_DIR) + "/models/" + model; }

std::vector<std::byte> u8_bytes(std::string_view text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

// A U8 tensor whose bytes are `text`, so tests can tell which file a tensor was read from.
TensorToWrite text_tensor(std::string name, std::string_view text) {
  return {std::move(name), DType::kU8, {int64_t(text.size())}, u8_bytes(text)};
}

std::string text_of(const TensorInfo& t) { return {reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()}; }

TEST(WeightStore, OpensTheShardsNamedByTheIndex) {
  Expected<WeightStore> store = WeightStore::open(fixture("llama"));
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ(store->num_tensors(), 20u);  // the index's weight_map entries
  EXPECT_EQ(store->files().size(), 3u);
  EXPECT_EQ(store->dir(), fixture("llama"));

  Expected<const TensorInfo*> embed = store->get("model.embed_tokens.weight", {704, 64});
  ASSERT_TRUE(embed.ok()) << embed.status().to_string();
  EXPECT_EQ((*embed)->dtype, DType::kBF16);
  EXPECT_THAT((*embed)->file, EndsWith("model-00001-of-00003.safetensors"));

  Expected<const TensorInfo*> norm = store->get("model.norm.weight", {64});
  ASSERT_TRUE(norm.ok()) << norm.status().to_string();
  EXPECT_THAT((*norm)->file, EndsWith("model-00003-of-00003.safetensors"));

  const std::vector<std::string> names = store->names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_TRUE(store->contains("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_FALSE(store->contains("lm_head.weight"));  // tied embeddings
}

TEST(WeightStore, ReadsSingleFileModelsOfEachDtype) {
  struct Case {
    const char* model;
    const char* tensor;
    std::vector<int64_t> shape;
    DType dtype;
  };
  const Case cases[] = {
      {"llama-bias", "model.layers.2.self_attn.o_proj.bias", {64}, DType::kF16},
      {"qwen2", "model.layers.1.self_attn.k_proj.bias", {32}, DType::kF32},
      {"qwen3", "model.layers.0.self_attn.q_norm.weight", {32}, DType::kBF16},
  };
  for (const Case& c : cases) {
    Expected<WeightStore> store = WeightStore::open(fixture(c.model));
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    EXPECT_EQ(store->files().size(), 1u) << c.model;  // model.safetensors only, never golden.safetensors
    EXPECT_FALSE(store->contains("logits.0")) << c.model;
    Expected<const TensorInfo*> t = store->get(c.tensor, c.shape);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ((*t)->dtype, c.dtype) << c.model;
  }
}

TEST(WeightStore, MissingTensorSuggestsTheNearestName) {
  Expected<WeightStore> store = WeightStore::open(fixture("qwen3"));
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  Expected<const TensorInfo*> t = store->get("model.layers.0.self_attn.q_proj.weigth");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(),
              HasSubstr("tensor 'model.layers.0.self_attn.q_proj.weigth' not found in " + fixture("qwen3")));
  EXPECT_THAT(t.status().message(), HasSubstr(fmt::format("({} tensors", store->num_tensors())));
  EXPECT_THAT(t.status().message(), HasSubstr("did you mean 'model.layers.0.self_attn.q_proj.weight'?"));
}

TEST(WeightStore, MissingTensorWithNothingCloseMakesNoSuggestion) {
  Expected<WeightStore> store = WeightStore::open(fixture("qwen3"));
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  Expected<const TensorInfo*> t = store->get("vision_tower.patch_embed.proj.weight");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("tensor 'vision_tower.patch_embed.proj.weight' not found"));
  EXPECT_THAT(t.status().message(), Not(HasSubstr("did you mean")));
}

TEST(WeightStore, ShapeMismatchNamesTensorFileAndBothShapes) {
  Expected<WeightStore> store = WeightStore::open(fixture("qwen2"));
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const std::vector<int64_t> expected = {96, 32};
  Expected<const TensorInfo*> t = store->get("model.layers.0.self_attn.k_proj.weight", expected);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("tensor 'model.layers.0.self_attn.k_proj.weight' in " + fixture("qwen2") +
                                              "/model.safetensors has shape [32, 96], expected [96, 32]"));
}

TEST(WeightStore, TensorsStayValidAfterTheStoreMoves) {
  ScratchDir dir;
  ASSERT_TRUE(
      write_safetensors(dir.file("model.safetensors"), {text_tensor("a", "alpha"), text_tensor("b", "beta")}).ok());
  Expected<WeightStore> opened = WeightStore::open(dir.path());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  WeightStore store = std::move(opened).value();
  WeightStore moved = std::move(store);
  Expected<const TensorInfo*> b = moved.get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(text_of(**b), "beta");
}

TEST(WeightStore, WithoutModelFileOrIndexReadsEverySafetensorsFile) {
  ScratchDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("part-b.safetensors"), {text_tensor("second", "two")}).ok());
  ASSERT_TRUE(write_safetensors(dir.file("part-a.safetensors"), {text_tensor("first", "one")}).ok());
  dir.write("notes.txt", "not weights");
  Expected<WeightStore> store = WeightStore::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ(store->names(), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(text_of(**store->get("first")), "one");
  EXPECT_EQ(text_of(**store->get("second")), "two");
}

TEST(WeightStore, SameTensorInTwoFilesIsAnError) {
  ScratchDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("a.safetensors"), {text_tensor("w", "one")}).ok());
  ASSERT_TRUE(write_safetensors(dir.file("b.safetensors"), {text_tensor("w", "two")}).ok());
  Expected<WeightStore> store = WeightStore::open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("tensor 'w'"));
  EXPECT_THAT(store.status().message(), HasSubstr(dir.file("a.safetensors")));
  EXPECT_THAT(store.status().message(), HasSubstr(dir.file("b.safetensors")));
}

TEST(WeightStore, IndexNamingAMissingShardIsAnError) {
  ScratchDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"), {text_tensor("a", "x")}).ok());
  dir.write("model.safetensors.index.json", R"({"metadata": {"total_size": 2}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  Expected<WeightStore> store = WeightStore::open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(store.status().message(), HasSubstr("tensor 'b'"));
  EXPECT_THAT(store.status().message(), HasSubstr("shard 'model-00002-of-00002.safetensors'"));
}

TEST(WeightStore, IndexMappingATensorToTheWrongShardIsAnError) {
  ScratchDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("s1.safetensors"), {text_tensor("a", "x")}).ok());
  ASSERT_TRUE(write_safetensors(dir.file("s2.safetensors"), {text_tensor("b", "y")}).ok());
  dir.write("model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  Expected<WeightStore> store = WeightStore::open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("tensor 'b'"));
  EXPECT_THAT(store.status().message(), HasSubstr(dir.file("s1.safetensors")));
}

TEST(WeightStore, CorruptIndexIsAnError) {
  ScratchDir dir;
  const std::string index = dir.write("model.safetensors.index.json", R"({"weight_map": )");
  Expected<WeightStore> store = WeightStore::open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(index));
  EXPECT_THAT(store.status().message(), HasSubstr("not valid JSON"));
}

TEST(WeightStore, BadShardReportsTheShardFile) {
  ScratchDir dir;
  const std::string shard = dir.write("model.safetensors", std::string("\xff\xff\x00\x00\x00\x00\x00\x00{}", 10));
  Expected<WeightStore> store = WeightStore::open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(shard));
}

TEST(WeightStore, FolderWithoutWeightsIsNotFound) {
  ScratchDir dir;
  dir.write("config.json", "{}");
  Expected<WeightStore> store = WeightStore::open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr("no weights in " + dir.path()));

  Expected<WeightStore> absent = WeightStore::open(dir.file("no-such-model"));
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(absent.status().message(), HasSubstr("no-such-model"));
}

}  // namespace
}  // namespace drift::weights
