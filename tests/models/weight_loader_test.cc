// The weight loader's new seams: extra safetensors files opened beside a model (and a name in two files
// refused), a rank's share of a tensor read from the file (each dimension, stacked parts, the bias of a
// row split only on rank 0; a part padded with zeros), tensors kept as stored for kernels that read their
// format, random weights whose parts are the whole draw's, and the parameter count of what was read.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <set>

#include "backend/ops.h"
#include "model/layers/linear.h"
#include "model/registry.h"
#include "model/weight_loader.h"
#include "weights/safetensors.h"
#include "weights/weight_store.h"

namespace drift::testing {
namespace {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "drift_loader_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<std::byte> f32_bytes(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> iota_floats(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<float> host(const backend::Buffer& b) {
  return std::vector<float>(b.view.data_as<float>(), b.view.data_as<float>() + b.view.numel());
}

// A store with w [4, 6] = 0..23, b [4] = 100..103 and packed U8 bytes [2, 3] = 1..6.
struct Fixture {
  ScratchDir dir;
  weights::WeightStore store;
  std::unique_ptr<backend::Ops> ops = backend::make_cpu_ops();

  Fixture() {
    const std::string path = dir.file("model.safetensors");
    std::vector<std::byte> packed(6);
    for (size_t i = 0; i < 6; ++i) packed[i] = std::byte(i + 1);
    EXPECT_TRUE(weights::write_safetensors(path, {{"w.weight", DType::kF32, {4, 6}, f32_bytes(iota_floats(24, 0))},
                                                  {"w.bias", DType::kF32, {4}, f32_bytes(iota_floats(4, 100))},
                                                  {"packed", DType::kU8, {2, 3}, packed}})
                    .ok());
    auto opened = weights::WeightStore::open(dir.file(""));
    EXPECT_TRUE(opened.ok()) << opened.status().to_string();
    store = std::move(opened).value();
  }
};

TEST(WeightStoreExtraFiles, AddsTensorsAndRefusesANameTwice) {
  Fixture f;
  const std::string extra = f.dir.file("retrofit.safetensors");
  ASSERT_TRUE(weights::write_safetensors(extra, {{"retrofit.w_c", DType::kF32, {2}, f32_bytes({7, 8})}}).ok());
  ASSERT_TRUE(f.store.add_file(extra).ok());
  EXPECT_TRUE(f.store.contains("retrofit.w_c"));
  EXPECT_TRUE(f.store.contains("w.weight"));
  const std::string clash = f.dir.file("clash.safetensors");
  ASSERT_TRUE(weights::write_safetensors(clash, {{"w.bias", DType::kF32, {1}, f32_bytes({1})}}).ok());
  const Status s = f.store.add_file(clash);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("w.bias"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("clash.safetensors"), std::string::npos) << s.message();
  EXPECT_FALSE(f.store.add_file(f.dir.file("missing.safetensors")).ok());
}

TEST(WeightLoaderShards, ReadsEachRanksPartAlongEitherDimension) {
  Fixture f;
  model::WeightLoader loader = model::WeightLoader::from_store(f.store, *f.ops);
  auto rows = loader.load("w.weight", {4, 6}, model::Shard{.dim = 0, .rank = 1, .world = 2});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_EQ(rows->view.size(0), 2);
  EXPECT_EQ(host(*rows), iota_floats(12, 12));
  auto cols = loader.load("w.weight", {4, 6}, model::Shard{.dim = 1, .rank = 2, .world = 3});
  ASSERT_TRUE(cols.ok()) << cols.status().to_string();
  EXPECT_EQ(cols->view.size(1), 2);
  EXPECT_EQ(host(*cols), (std::vector<float>{4, 5, 10, 11, 16, 17, 22, 23}));
  auto uneven = loader.load("w.weight", {4, 6}, model::Shard{.dim = 0, .rank = 0, .world = 3});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("3 equal parts"), std::string::npos) << uneven.status().message();
  EXPECT_EQ(loader.num_parameters(), 24);  // one tensor, counted whole once
}

// A kernel's width multiple: the part followed by zeros along the split dimension, converted or as stored.
TEST(WeightLoaderShards, PadsAPartWithZeros) {
  Fixture f;
  model::WeightLoader loader = model::WeightLoader::from_store(f.store, *f.ops);
  auto cols = loader.load("w.weight", {4, 6}, model::Shard{.dim = 1, .rank = 1, .world = 2, .padded_to = 4});
  ASSERT_TRUE(cols.ok()) << cols.status().to_string();
  EXPECT_EQ(cols->view.size(1), 4);
  EXPECT_EQ(host(*cols), (std::vector<float>{3, 4, 5, 0, 9, 10, 11, 0, 15, 16, 17, 0, 21, 22, 23, 0}));
  auto rows = loader.load("w.weight", {4, 6}, model::Shard{.dim = 0, .rank = 0, .world = 1, .padded_to = 5});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  std::vector<float> expected = iota_floats(24, 0);
  expected.resize(30, 0.0f);
  EXPECT_EQ(host(*rows), expected);
  auto packed = loader.load_stored("packed", {2, 3}, DType::kU8, model::Shard{.dim = 1, .rank = 0, .world = 3, .padded_to = 2});
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  const auto* bytes = packed->view.data_as<uint8_t>();
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + packed->view.numel()), (std::vector<uint8_t>{1, 0, 4, 0}));
  auto smaller = loader.load("w.weight", {4, 6}, model::Shard{.dim = 1, .rank = 0, .world = 2, .padded_to = 2});
  ASSERT_FALSE(smaller.ok());
  EXPECT_NE(smaller.status().message().find("smaller than the part"), std::string::npos) << smaller.status().message();
}

TEST(WeightLoaderShards, ColumnAndRowSplitLinears) {
  Fixture f;
  model::WeightLoader loader = model::WeightLoader::from_store(f.store, *f.ops);
  // Column split, rank 1 of 2: output rows 2..3 and their bias.
  auto column = model::Linear::load_stacked(loader, {"w"}, {4}, 6, true, model::LinearSplit::kColumn, 1, 2);
  ASSERT_TRUE(column.ok()) << column.status().to_string();
  EXPECT_EQ(host(column->weight), iota_floats(12, 12));
  EXPECT_EQ(host(column->bias), (std::vector<float>{102, 103}));
  // Row split: input columns 3..5; the bias stays with rank 0 so the all-reduce adds it once.
  auto row0 = model::Linear::load_stacked(loader, {"w"}, {4}, 6, true, model::LinearSplit::kRow, 0, 2);
  auto row1 = model::Linear::load_stacked(loader, {"w"}, {4}, 6, true, model::LinearSplit::kRow, 1, 2);
  ASSERT_TRUE(row0.ok() && row1.ok());
  EXPECT_EQ(host(row1->weight), (std::vector<float>{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}));
  EXPECT_TRUE(row0->bias.view.defined());
  EXPECT_FALSE(row1->bias.view.defined());
  // One rank: the whole matrix, and its forward is x @ w^T + b (the all-reduce of one rank changes nothing).
  auto whole = model::Linear::load(loader, "w", 4, 6, true, model::LinearSplit::kRow);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(host(whole->weight), iota_floats(24, 0));
  backend::Buffer x = f.ops->alloc(DType::kF32, {1, 6}), out = f.ops->alloc(DType::kF32, {1, 4});
  std::vector<float> ones(6, 1.0f);
  f.ops->copy_from_host(x.view, ones.data());
  whole->forward(*f.ops, x.view, out.view);
  EXPECT_EQ(host(out), (std::vector<float>{100 + 15, 101 + 51, 102 + 87, 103 + 123}));
}

TEST(WeightLoaderStored, KeepsTheBytesAsStored) {
  Fixture f;
  model::WeightLoader loader = model::WeightLoader::from_store(f.store, *f.ops);
  auto packed = loader.load_stored("packed", {2, 3}, DType::kU8);
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  EXPECT_EQ(packed->view.dtype, DType::kU8);
  const auto* bytes = packed->view.data_as<uint8_t>();
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + 6), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  auto wrong = loader.load_stored("w.weight", {4, 6}, DType::kU8);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("kept as stored"), std::string::npos);
  model::WeightLoader random = model::WeightLoader::random(3, 0.02f, *f.ops);
  auto random_bytes = random.load_stored("x_blocks", {64}, DType::kU8);
  ASSERT_TRUE(random_bytes.ok());
  const auto* r = random_bytes->view.data_as<uint8_t>();
  EXPECT_GT(std::count_if(r, r + 64, [](uint8_t b) { return b != 0; }), 32);
  // MXFP4 counts as its values: two a block byte, none for the scales.
  ASSERT_TRUE(random.load_stored("x_scales", {4}, DType::kU8).ok());
  EXPECT_EQ(random.num_parameters(), 128);
}

// Random weights depend on (seed, index) alone: each rank's draw of its part is that part of the whole
// draw, for normals (odd offsets and lengths included) and for stored bytes; the normals look normal.
TEST(WeightLoaderRandom, APartIsThatPartOfTheWholeDraw) {
  Fixture f;
  auto draw = [&](const std::vector<int64_t>& shape, const model::Shard& shard) {
    model::WeightLoader random = model::WeightLoader::random(5, 0.5f, *f.ops);
    auto buf = random.load("w.weight", shape, shard);
    EXPECT_TRUE(buf.ok()) << buf.status().to_string();
    return buf.ok() ? host(*buf) : std::vector<float>{};
  };
  const std::vector<float> whole = draw({6, 5}, {}), rows = draw({6, 5}, {.dim = 0, .rank = 1, .world = 3}),
                           cols = draw({6, 5}, {.dim = 1, .rank = 0, .world = 5});
  ASSERT_EQ(whole.size(), 30u);
  EXPECT_EQ(rows, std::vector<float>(whole.begin() + 10, whole.begin() + 20));
  for (size_t r = 0; r < 6; ++r) EXPECT_EQ(cols[r], whole[r * 5]) << r;
  const std::vector<float> many = draw({4096}, {});
  double mean = 0, var = 0;
  for (float v : many) mean += v / 4096.0;
  for (float v : many) var += (v - mean) * (v - mean) / 4096.0;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.05);
  EXPECT_GT(std::set<float>(many.begin(), many.end()).size(), 4000u);  // no pair or range drawn twice
  auto bytes = [&](const model::Shard& shard) {
    model::WeightLoader random = model::WeightLoader::random(5, 0.5f, *f.ops);
    auto buf = random.load_stored("x_blocks", {3, 24}, DType::kU8, shard);
    EXPECT_TRUE(buf.ok());
    const auto* b = buf->view.data_as<uint8_t>();
    return std::vector<uint8_t>(b, b + buf->view.numel());
  };
  const std::vector<uint8_t> all = bytes({}), third = bytes({.dim = 1, .rank = 2, .world = 3});
  for (size_t r = 0; r < 3; ++r)
    EXPECT_EQ(std::vector<uint8_t>(third.begin() + long(r * 8), third.begin() + long(r * 8 + 8)),
              std::vector<uint8_t>(all.begin() + long(r * 24 + 16), all.begin() + long(r * 24 + 24)));
}

TEST(WeightLoader, ParameterCountMatchesTheStoredTensors) {
  // The llama fixture ties its embeddings: every stored element is a parameter, counted once.
  const std::string dir = std::string(DRIFT_FIXTURES_DIR) + "/models/llama";
  auto ops = backend::make_cpu_ops();
  auto m = model::load_model(dir, *ops);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto store = weights::WeightStore::open(dir);
  ASSERT_TRUE(store.ok());
  int64_t stored = 0;
  for (const std::string& name : store->names()) stored += (*store->get(name))->numel();
  EXPECT_EQ((*m)->num_parameters(), stored);
}

}  // namespace
}  // namespace drift::testing
