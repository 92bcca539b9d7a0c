// Loading EAGLE-3 head folders for the llama fixture: each way a folder can fail to fit gives a Status
// naming the tensor or field (contract 10); capture ids are converted to input-of-layer ids (+1) or
// defaulted; d2t is applied; stored dtypes other than fp32 load; load_model() refuses a head.
#include <gtest/gtest.h>

#include "eagle3_head_folder.h"
#include "fixture_model.h"
#include "model/arch/eagle3.h"
#include "model/registry.h"

namespace drift::testing {
namespace {

class Eagle3Load : public ::testing::Test {
 protected:
  void SetUp() override {
    ops_ = backend::make_cpu_ops();
    auto target = model::load_model(fixture_dir("llama"), *ops_);
    ASSERT_TRUE(target.ok()) << target.status().to_string();
    target_ = std::move(target).value();
    folder_ = random_head_folder(*target_, 300, 96, 21);
  }

  Expected<std::unique_ptr<model::Eagle3Head>> load(const HeadFolder& folder) {
    return model::load_eagle3_head(folder.write(), *target_, *ops_);
  }
  // The load fails and its message holds every one of `parts`.
  void expect_error(const HeadFolder& folder, std::initializer_list<const char*> parts) {
    auto head = load(folder);
    ASSERT_FALSE(head.ok());
    for (const char* part : parts) EXPECT_NE(head.status().message().find(part), std::string::npos) << head.status().to_string();
  }

  std::unique_ptr<backend::Ops> ops_;
  std::unique_ptr<model::Model> target_;
  HeadFolder folder_;
};

TEST_F(Eagle3Load, MissingTensorIsNamed) {
  folder_.tensors.erase("midlayer.mlp.up_proj.weight");
  expect_error(folder_, {"midlayer.mlp.up_proj.weight"});
}

TEST_F(Eagle3Load, WrongShapeIsNamedWithBothShapes) {
  folder_.tensors["fc.weight"] = {{64, 100}, std::vector<float>(6400), DType::kF32};
  expect_error(folder_, {"fc.weight", "[64, 100]", "[64, 192]"});
}

TEST_F(Eagle3Load, TargetHiddenMustBeTheTargets) {
  folder_.config["target_hidden_size"] = 32;
  expect_error(folder_, {"target_hidden_size", "32", "64"});
}

TEST_F(Eagle3Load, VocabMustBeTheTargets) {
  folder_.config["vocab_size"] = 700;
  expect_error(folder_, {"vocab_size", "700", "704"});
}

TEST_F(Eagle3Load, CaptureIdOutOfRangeIsNamed) {
  folder_.config["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {0, 1, 2}}};
  expect_error(folder_, {"eagle_aux_hidden_state_layer_ids", "holds 2"});
}

TEST_F(Eagle3Load, D2tOutsideTheVocabularyIsNamed) {
  folder_.d2t[3] = 1000;
  expect_error(folder_, {"d2t[3]", "1003"});
  folder_.d2t[3] = -4;
  expect_error(folder_, {"d2t[3]", "-1"});
}

TEST_F(Eagle3Load, D2tMustBeInt64) {
  folder_.d2t_dtype = DType::kF32;
  expect_error(folder_, {"d2t", "F32", "I64"});
}

TEST_F(Eagle3Load, SmallerDraftVocabNeedsD2t) {
  folder_.d2t.clear();
  expect_error(folder_, {"d2t", "300", "704"});
}

TEST_F(Eagle3Load, NotAHeadArchitecture) {
  folder_.config["architectures"] = {"LlamaForCausalLM"};
  expect_error(folder_, {"LlamaForCausalLM", "not an EAGLE-3 head"});
}

TEST_F(Eagle3Load, NormBeforeFcNeedsItsNorm) {
  folder_.config["norm_before_fc"] = true;
  expect_error(folder_, {"input_norm.weight"});
}

TEST_F(Eagle3Load, Eagle31VariantsAreRefused) {
  folder_.config["fc_norm"] = true;
  expect_error(folder_, {"fc_norm"});
}

TEST_F(Eagle3Load, LoadModelRefusesAHead) {
  auto m = model::load_model(folder_.write(), *ops_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("an EAGLE-3 draft head: load it with --draft"), std::string::npos)
      << m.status().to_string();
}

TEST_F(Eagle3Load, CaptureIdsAreOutputOfLayerIds) {
  folder_.config["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {1, 0, 1}}};
  auto nested = load(folder_);
  ASSERT_TRUE(nested.ok()) << nested.status().to_string();
  EXPECT_EQ((*nested)->eagle().capture_layers, (std::vector<int32_t>{2, 1, 2}));
  folder_.config["eagle_aux_hidden_state_layer_ids"] = {0, 0, 1};  // the top level wins
  auto top = load(folder_);
  ASSERT_TRUE(top.ok()) << top.status().to_string();
  EXPECT_EQ((*top)->eagle().capture_layers, (std::vector<int32_t>{1, 1, 2}));
  folder_.config.erase("eagle_config");
  folder_.config.erase("eagle_aux_hidden_state_layer_ids");
  auto defaulted = load(folder_);
  ASSERT_TRUE(defaulted.ok()) << defaulted.status().to_string();
  EXPECT_EQ((*defaulted)->eagle().capture_layers, (std::vector<int32_t>{2, 1, 0}));
}

TEST_F(Eagle3Load, D2tMapsDraftIdsToTargetIds) {
  for (size_t i = 0; i < folder_.d2t.size(); ++i) folder_.d2t[i] = int64_t(i % 5) * 3;
  folder_.config["norm_before_residual"] = true;
  auto head = load(folder_);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  const auto ids = (*head)->draft_to_target();
  ASSERT_EQ(ids.size(), 300u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], int32_t(i + (i % 5) * 3)) << i;
  EXPECT_TRUE((*head)->eagle().norm_before_residual);
  EXPECT_EQ((*head)->eagle().draft_vocab, 300);
  EXPECT_EQ((*head)->eagle().target_hidden, 64);
}

TEST_F(Eagle3Load, FullDraftVocabNeedsNoD2t) {
  HeadFolder full = random_head_folder(*target_, 704, 96, 4);
  full.d2t.clear();
  auto head = load(full);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_EQ((*head)->draft_to_target()[703], 703);
}

TEST_F(Eagle3Load, HalfPrecisionWeightsLoad) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    HeadFolder folder = folder_;
    folder.store_as(dtype);
    auto head = load(folder);
    EXPECT_TRUE(head.ok()) << dtype_name(dtype) << ": " << head.status().to_string();
  }
}

}  // namespace
}  // namespace drift::testing
