// MLA-lite and DSA-lite retrofits on the CPU backend: a full-rank MLA-lite retrofit is the model (its
// logits within 1e-4 of the largest), a cut one is not and caches less; DSA-lite whose top-k covers the
// context is full attention (and skips the selection where it covers the whole table), a smaller top-k is not; chunked prefill and batching give the same logits
// with both on; bad retrofit files are refused with the name of what is wrong. Where the CUDA backend is
// built: MLA-lite runs through its MLA kernel and matches the CPU (on a GPU), DSA-lite is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "drift/model_info.h"
#include "fixture_model.h"
#include "model/layer_plan.h"
#include "model/registry.h"
#include "model_copy.h"
#include "retrofit_file.h"
#include "weights/safetensors.h"
#ifdef DRIFT_TEST_CUDA_SUPPORT
#include "backend/cuda/cuda_ops.h"
#endif

namespace drift::testing {
namespace {

constexpr double kTolerance = 1e-4;

// The llama fixture with RoPE on half of each head (partial_rotary_factor 0.5): its other features are
// NoPE already, so a full-rank retrofit that keeps every RoPE frequency also absorbs a key projection.
std::string partial_rope_llama() {
  static const std::string dir =
      copy_model(fixture_dir("llama"), {}, {{"config.json", {{"partial_rotary_factor", 0.5}}}});
  return dir;
}

std::string retrofit_path(const std::string& name, const RetrofitRecipe& recipe, const std::string& model_dir) {
  const std::string path = fresh_temp_dir("retrofit") + "/" + name + ".safetensors";
  const Status s = write_test_retrofit(model_dir, path, recipe);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return path;
}

struct Loaded {
  std::unique_ptr<backend::Ops> ops;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<runner::ModelRunner> runner;
};

Loaded load(const std::string& dir, const std::string& retrofit,
            std::unique_ptr<backend::Ops> ops = backend::make_cpu_ops()) {
  Loaded l;
  l.ops = std::move(ops);
  model::LoadOptions options;
  options.retrofit_file = retrofit;
  auto model = model::load_model(dir, *l.ops, options);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return l;
  l.model = std::move(model).value();
  runner::RunnerConfig rc;
  rc.block_size = 16;
  rc.num_blocks.assign(l.model->kv_specs(l.ops->compute_dtype()).size(), 64);
  rc.max_num_tokens = 256;
  rc.max_num_seqs = 8;
  rc.max_model_len = 256;
  l.runner = std::make_unique<runner::ModelRunner>(*l.model, *l.ops, rc);
  return l;
}

std::vector<int32_t> prompt(int32_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) ids[size_t(i)] = (i * 37 + 11) % 700;
  return ids;
}

// Logits of every token of `ids` in `chunk`-token steps, over blocks starting at `first_block`.
std::vector<float> logits_of(Loaded& l, const std::vector<int32_t>& ids, int32_t chunk, int32_t first_block = 0) {
  std::vector<int32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), first_block);
  const std::vector<std::vector<int32_t>> tables(l.runner->config().num_kv_groups(), blocks);
  std::vector<float> all;
  for (int32_t done = 0; done < int32_t(ids.size()); done += chunk) {
    const int32_t n = std::min<int32_t>(chunk, int32_t(ids.size()) - done);
    runner::SeqStep step{ids, done, n, tables, false, true};
    auto logits = l.runner->step({&step, 1});
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return {};
    all.insert(all.end(), logits->begin(), logits->end());
  }
  return all;
}

double error_between(Loaded& a, Loaded& b, const std::vector<int32_t>& ids) {
  const std::vector<float> x = logits_of(a, ids, int32_t(ids.size())), y = logits_of(b, ids, int32_t(ids.size()));
  EXPECT_EQ(x.size(), y.size());
  return x.size() == y.size() && !x.empty() ? relative_max_error(x.data(), y.data(), x.size()) : 1.0;
}

int64_t kv_bytes(const model::Model& m) {
  int64_t bytes = 0;
  for (const core::KvSpec& s : m.kv_specs(DType::kBF16)) bytes += s.bytes_per_token_per_layer() * s.num_layers;
  return bytes;
}

TEST(RetrofitTest, FullRankMlaLiteGivesTheModelsLogits) {
  const std::string dir = partial_rope_llama();
  Loaded base = load(dir, "");
  Loaded lite = load(dir, retrofit_path("full", {}, dir));
  ASSERT_TRUE(base.runner && lite.runner);
  EXPECT_EQ(lite.model->kv_specs(DType::kBF16)[0].name, "mla_lite");
  EXPECT_LE(error_between(lite, base, prompt(40)), kTolerance);
}

// Qwen2 (q/k/v biases) and llama with attention_bias (o_proj's too): the kept K rows keep their bias, the
// nope features' bias cancels in the softmax and V's is folded into o_proj, so full rank is still the model.
TEST(RetrofitTest, FullRankMlaLiteCarriesQkvBiases) {
  for (const char* family : {"qwen2", "llama-bias"}) {
    const std::string dir = copy_model(fixture_dir(family), {}, {{"config.json", {{"partial_rotary_factor", 0.5}}}});
    Loaded base = load(dir, "");
    Loaded lite = load(dir, retrofit_path(std::string("full_") + family, {}, dir));
    ASSERT_TRUE(base.runner && lite.runner) << family;
    ASSERT_TRUE(lite.model->config().attention_bias) << family;
    EXPECT_EQ(lite.model->kv_specs(DType::kBF16)[0].name, "mla_lite") << family;
    EXPECT_LE(error_between(lite, base, prompt(40)), kTolerance) << family;
    // Cut below full rank it is an approximation again: the logits move.
    Loaded cut = load(dir, retrofit_path(std::string("cut_") + family, {.rank = 12, .rope_freqs = {0, 1}}, dir));
    ASSERT_TRUE(cut.runner) << family;
    EXPECT_GT(error_between(cut, base, prompt(40)), kTolerance) << family;
  }
}

TEST(RetrofitTest, CutMlaLiteCachesLessAndChangesTheLogits) {
  const std::string dir = partial_rope_llama();
  Loaded base = load(dir, "");
  Loaded lite = load(dir, retrofit_path("cut", {.rank = 16, .rope_freqs = {0, 1}}, dir));
  ASSERT_TRUE(base.runner && lite.runner);
  // 2 kv heads x 16 x (K + V) = 64 values per layer before; 16 latent + 2 heads x 4 RoPE features after.
  EXPECT_EQ(kv_bytes(*base.model), 2 * 64 * 2);
  EXPECT_EQ(kv_bytes(*lite.model), 2 * (16 + 8) * 2);
  EXPECT_GT(error_between(lite, base, prompt(40)), 1e-2);
}

// Top-k 60 over 60 tokens: the selection keeps every key (the tables are 64 slots wide, so the sparse kernels
// run) and is full attention. Top-k 64 covers the whole table: the layer skips the selection and attends
// densely, the very ops of the plain model, so the logits are equal to the last bit.
TEST(RetrofitTest, DsaLiteWithTopKOverTheContextIsFullAttention) {
  const std::string dir = fixture_dir("llama");
  Loaded base = load(dir, "");
  Loaded covering = load(dir, retrofit_path("dsa_60", {.mla_lite = false, .dsa_lite = true, .top_k = 60}, dir));
  Loaded dense = load(dir, retrofit_path("dsa_all", {.mla_lite = false, .dsa_lite = true, .top_k = 64}, dir));
  Loaded sparse = load(dir, retrofit_path("dsa_few", {.mla_lite = false, .dsa_lite = true, .top_k = 8}, dir));
  ASSERT_TRUE(base.runner && covering.runner && dense.runner && sparse.runner);
  ASSERT_EQ(dense.model->kv_specs(DType::kBF16).size(), 2u);
  EXPECT_EQ(dense.model->kv_specs(DType::kBF16)[1].name, "indexer");
  EXPECT_LE(error_between(covering, base, prompt(60)), 1e-6);
  EXPECT_EQ(error_between(dense, base, prompt(60)), 0.0);
  EXPECT_GT(error_between(sparse, base, prompt(60)), 1e-3);
}

// A dense step still writes the indexer's keys: a 100-token prompt whose first 48 tokens run dense (64
// slots <= top-k 64) and the rest sparse (128 slots) scores the first chunk's keys as one sparse step does.
TEST(RetrofitTest, DsaLiteDenseStepsWriteTheKeysLaterStepsSelectFrom) {
  const std::string dir = fixture_dir("llama");
  Loaded l = load(dir, retrofit_path("dsa_64", {.mla_lite = false, .dsa_lite = true, .top_k = 64}, dir));
  Loaded base = load(dir, "");
  ASSERT_TRUE(l.runner && base.runner);
  const std::vector<int32_t> ids = prompt(100);
  const std::vector<float> whole = logits_of(l, ids, 100);
  const std::vector<float> chunked = logits_of(l, ids, 48, 20);
  ASSERT_EQ(chunked.size(), whole.size());
  EXPECT_LE(relative_max_error(chunked.data(), whole.data(), whole.size()), 1e-5);
  // Past 64 tokens the selection leaves keys out: not the plain model's logits.
  const std::vector<float> plain = logits_of(base, ids, 100);
  ASSERT_EQ(plain.size(), whole.size());
  EXPECT_GT(relative_max_error(whole.data(), plain.data(), whole.size()), 1e-3);
}

// Both retrofits, with the model's kept K rows and with the tool's default form (a query adapter and one
// shared RoPE key).
TEST(RetrofitTest, BothRetrofitsGiveTheSameLogitsChunkedAndOnOtherBlocks) {
  const std::string dir = partial_rope_llama();
  const RetrofitRecipe recipes[] = {
      {.rank = 24, .rope_freqs = {0, 2}, .dsa_lite = true, .top_k = 10},
      {.rank = 24, .rope_freqs = {0, 2}, .q_rank = 2, .own_k_rope = true, .shared_rope = true, .dsa_lite = true,
       .top_k = 10}};
  for (const RetrofitRecipe& recipe : recipes) {
    Loaded l = load(dir, retrofit_path("both", recipe, dir));
    ASSERT_TRUE(l.runner);
    const std::vector<int32_t> ids = prompt(50);
    const std::vector<float> whole = logits_of(l, ids, 50);
    for (const int32_t chunk : {1, 7, 16}) {
      const std::vector<float> chunked = logits_of(l, ids, chunk, 20);
      ASSERT_EQ(chunked.size(), whole.size());
      EXPECT_LE(relative_max_error(chunked.data(), whole.data(), whole.size()), 1e-5)
          << "chunk " << chunk << (recipe.shared_rope ? ", shared RoPE key" : "");
    }
  }
}

// tools/retrofit/make_fixture.py: a PCA-initialised MLA-lite (d_c 16, RoPE on 2 of 8 frequencies, a rank-3
// query adapter and kept K rows of its own) plus a DSA-lite indexer (top-k 8) of the llama fixture, and the
// logits the tool's own PyTorch forward gives: the tool and the engine agree on the file's layout, the partial
// RoPE, the latent, the folded query adapter and the top-k rule. Then an MLA-lite alone whose kept K rows are
// one RoPE key shared by both KV heads (DeepSeek's cache row); then a DSA-lite alone whose indexer rotates
// its first features by position.
class RetrofitToolTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RetrofitToolTest, EngineMatchesTheToolsLogits) {
  const std::string dir = fixture_dir("llama");
  const std::string fixtures = std::string(DRIFT_FIXTURES_DIR) + "/retrofit/" + GetParam();
  Loaded l = load(dir, fixtures + ".safetensors");
  ASSERT_TRUE(l.runner);
  auto golden = weights::SafetensorsFile::open(fixtures + "_golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const weights::TensorInfo* ids_info = golden->find("ids");
  const weights::TensorInfo* logits_info = golden->find("logits");
  ASSERT_TRUE(ids_info != nullptr && logits_info != nullptr);
  std::vector<int32_t> ids(size_t(ids_info->numel()));
  std::memcpy(ids.data(), ids_info->bytes.data(), ids_info->bytes.size());
  std::vector<float> expected(size_t(logits_info->numel()));
  std::memcpy(expected.data(), logits_info->bytes.data(), logits_info->bytes.size());
  const std::vector<float> got = logits_of(l, ids, int32_t(ids.size()));
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_LE(relative_max_error(got.data(), expected.data(), got.size()), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(ToolFiles, RetrofitToolTest,
                         ::testing::Values("llama_retrofit", "llama_retrofit_shared_rope", "llama_retrofit_index_rope"));

TEST(RetrofitTest, InspectShowsKvBytesWithAndWithout) {
  const std::string dir = partial_rope_llama();
  const std::string file = retrofit_path("inspect", {.rank = 16, .rope_freqs = {0, 1}}, dir);
  auto plain = inspect_model(dir, "bf16");
  auto with = inspect_model(dir, "bf16", file);
  ASSERT_TRUE(plain.ok() && with.ok()) << with.status().to_string();
  EXPECT_EQ(with->kv_bytes_per_token_without_retrofit, plain->kv_bytes_per_token);
  EXPECT_EQ(with->kv_bytes_per_token, 2 * (16 + 8) * 2);
  EXPECT_EQ(with->kv_groups[0].name, "mla_lite");
  EXPECT_NE(with->retrofit_summary.find("MLA-lite d_c 16, RoPE kept on 2 frequencies (a key per KV head), a cache row "
                                        "of 24 values"),
            std::string::npos)
      << with->retrofit_summary;
  // One shared RoPE key: d_c + 4 values a layer, not d_c + 2 x 4.
  const std::string shared =
      retrofit_path("inspect_shared", {.rank = 16, .rope_freqs = {0, 1}, .own_k_rope = true, .shared_rope = true}, dir);
  auto with_shared = inspect_model(dir, "bf16", shared);
  ASSERT_TRUE(with_shared.ok()) << with_shared.status().to_string();
  EXPECT_EQ(with_shared->kv_bytes_per_token, 2 * (16 + 4) * 2);
  EXPECT_NE(with_shared->retrofit_summary.find("(one shared key), a cache row of 20 values"), std::string::npos)
      << with_shared->retrofit_summary;
  // An indexer, rotating its first 4 features.
  const std::string sparse = retrofit_path(
      "inspect_dsa", {.mla_lite = false, .dsa_lite = true, .top_k = 12, .local_window = 3, .index_rope = 4}, dir);
  auto with_sparse = inspect_model(dir, "bf16", sparse);
  ASSERT_TRUE(with_sparse.ok()) << with_sparse.status().to_string();
  EXPECT_EQ(with_sparse->retrofit_summary, "DSA-lite indexer 2 heads x 8 (RoPE on 4), top-12 (1 sinks, window 3)");
}

// A retrofit file rewritten without `drop`, with `reshape` given a wrong shape, metadata changed and tensors renamed.
std::string damaged(const std::string& good, const std::string& drop, const std::string& reshape,
                    const std::map<std::string, std::string>& metadata_changes = {},
                    const std::map<std::string, std::string>& renames = {}) {
  auto file = weights::SafetensorsFile::open(good);
  EXPECT_TRUE(file.ok());
  std::vector<weights::TensorToWrite> tensors;
  for (const std::string& name : file->names()) {
    if (name == drop) continue;
    const weights::TensorInfo* t = file->find(name);
    std::vector<int64_t> shape = t->shape;
    if (name == reshape) shape = {shape[0] / 2, shape[1] * 2};
    const auto renamed = renames.find(name);
    tensors.emplace_back(renamed == renames.end() ? name : renamed->second, t->dtype, shape,
                         std::vector<std::byte>(t->bytes.begin(), t->bytes.end()));
  }
  std::map<std::string, std::string> meta = file->metadata();
  for (const auto& [k, v] : metadata_changes) meta[k] = v;
  const std::string path = fresh_temp_dir("retrofit_bad") + "/bad.safetensors";
  EXPECT_TRUE(weights::write_safetensors(path, tensors, meta).ok());
  return path;
}

std::string load_error(const std::string& dir, const std::string& retrofit) {
  auto ops = backend::make_cpu_ops();
  model::LoadOptions options;
  options.retrofit_file = retrofit;
  auto model = model::load_model(dir, *ops, options);
  return model.ok() ? "" : model.status().message();
}

TEST(RetrofitTest, BadRetrofitFilesAreRefusedByName) {
  const std::string dir = partial_rope_llama();
  const std::string good = retrofit_path("good", {.rank = 16, .rope_freqs = {0, 1}, .dsa_lite = true}, dir);
  ASSERT_EQ(load_error(dir, good), "");
  const std::string k_up = "model.layers.1.self_attn.mla_lite.k_up.weight";
  EXPECT_NE(load_error(dir, damaged(good, k_up, "")).find(k_up), std::string::npos);
  const std::string index_q = "model.layers.1.self_attn.dsa_lite.index_q.weight";
  EXPECT_NE(load_error(dir, damaged(good, "", index_q)).find(index_q), std::string::npos);
  EXPECT_NE(load_error(dir, damaged(good, "", "", {{"mla_lite.rope_freqs", "0,9"}})).find("frequency 9"),
            std::string::npos);
  EXPECT_NE(load_error(dir, damaged(good, "", "", {{"dsa_lite.top_k", "3"}})).find("dsa_lite.top_k"), std::string::npos);
  // Parts a newer tool might write are refused, not skipped: the file would compute something else here.
  EXPECT_NE(load_error(dir, damaged(good, "", "", {{"dsa_lite.index_norm", "1"}})).find("'dsa_lite.index_norm'"),
            std::string::npos);
  // An indexer RoPE of an odd or too wide span.
  EXPECT_NE(load_error(dir, damaged(good, "", "", {{"dsa_lite.index_rope", "3"}})).find("dsa_lite.index_rope"),
            std::string::npos);
  EXPECT_NE(load_error(dir, damaged(good, "", "", {{"dsa_lite.index_rope", "10"}})).find("dsa_lite.index_rope"),
            std::string::npos);
  EXPECT_EQ(load_error(dir, damaged(good, "", "", {{"dsa_lite.index_rope", "8"}})), "");
  const std::string index_k = "model.layers.1.self_attn.dsa_lite.index_k.weight";
  const std::string unknown = "model.layers.1.self_attn.dsa_lite.index_k_norm.weight";
  EXPECT_NE(load_error(dir, damaged(good, "", "", {}, {{index_k, unknown}})).find(unknown), std::string::npos);
  const std::string too_wide = retrofit_path("wide", {.rank = 61, .rope_freqs = {0, 1}}, dir);
  EXPECT_NE(load_error(dir, too_wide).find("d_c = 61"), std::string::npos);
  EXPECT_NE(load_error(fixture_dir("qwen3"), good).find("qk_norm"), std::string::npos);
  // A query adapter is both its halves; its kept K rows are G x rope_dim of them.
  const std::string adapted = retrofit_path("adapted", {.rank = 16, .rope_freqs = {0, 1}, .q_rank = 2, .own_k_rope = true}, dir);
  ASSERT_EQ(load_error(dir, adapted), "");
  const std::string q_up = "model.layers.0.self_attn.mla_lite.q_up.weight";
  EXPECT_NE(load_error(dir, damaged(adapted, q_up, "")).find("come together"), std::string::npos);
  const std::string k_rope = "model.layers.1.self_attn.mla_lite.k_rope.weight";
  EXPECT_NE(load_error(dir, damaged(adapted, "", k_rope)).find(k_rope), std::string::npos);
  // 4 kept K rows (one shared key of 2 frequencies) against 3 frequencies: neither 6 rows nor 2 x 6.
  const std::string shared =
      retrofit_path("shared", {.rank = 16, .rope_freqs = {0, 1}, .own_k_rope = true, .shared_rope = true}, dir);
  ASSERT_EQ(load_error(dir, shared), "");
  const std::string odd = load_error(dir, damaged(shared, "", "", {{"mla_lite.rope_freqs", "0,1,2"}}));
  EXPECT_NE(odd.find("shared RoPE key"), std::string::npos) << odd;
}

#ifdef DRIFT_TEST_CUDA_SUPPORT
TEST(RetrofitCudaTest, BothRetrofitsRunAndMatchTheCpu) {
  const std::string dir = partial_rope_llama();
  // With a query adapter and kept K rows of its own: folded at load, so the GPU's projections carry them too.
  const std::string lite =
      retrofit_path("cuda_lite", {.rank = 40, .rope_freqs = {0, 1}, .q_rank = 3, .own_k_rope = true}, dir);
  // top_k over the prompt: every position is kept, so CPU and GPU attend alike (the op tests hold the
  // choice itself to the CPU's).
  const std::string sparse =
      retrofit_path("cuda_dsa", {.mla_lite = false, .dsa_lite = true, .top_k = 64, .index_rope = 4}, dir);
  // One shared RoPE key; a cache row of 44 + 4 (the latent kernels take widths in multiples of 8).
  const std::string shared = retrofit_path(
      "cuda_shared", {.rank = 44, .rope_freqs = {0, 1}, .q_rank = 3, .own_k_rope = true, .shared_rope = true}, dir);
  const weights::ModelConfig config = [&] {
    auto c = weights::load_model_config(dir);
    EXPECT_TRUE(c.ok());
    return *c;
  }();
  for (const std::string& file : {lite, sparse, shared}) {
    weights::ModelConfig c = config;
    ASSERT_TRUE(model::apply_retrofit(c, file).ok());
    const model::LayerPlan plan = model::plan_layers(c);
    backend::AttentionShape shape = model::attention_shape(c, plan.layers[0], DType::kBF16);
    const Status s = backend::CudaOps::check_attention(shape);
    EXPECT_TRUE(s.ok()) << file << ": " << s.to_string();
    if (shape.sparse_top_k == 0) continue;
    shape.sinks = true;  // the sparse op takes no sink logits: refused by name
    const Status refused = backend::CudaOps::check_attention(shape);
    EXPECT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("sparse attention"), std::string::npos) << refused.message();
  }
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const std::string& file : {lite, sparse, shared}) {
    auto cuda_ops = backend::make_cuda_ops();
    ASSERT_TRUE(cuda_ops.ok()) << cuda_ops.status().to_string();
    Loaded cpu = load(dir, file), gpu = load(dir, file, std::move(cuda_ops).value());
    ASSERT_TRUE(cpu.runner && gpu.runner);
    EXPECT_LE(error_between(gpu, cpu, prompt(40)), 3e-2) << file;
  }
}
#endif

}  // namespace
}  // namespace drift::testing
