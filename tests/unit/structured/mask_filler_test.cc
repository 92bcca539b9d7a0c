// MaskFiller: masks filled on several threads equal the serial ones bit for bit, over random schemas,
// random states of random documents and random batch sizes, with pools reused across steps; and under a
// stress of many rows on more threads than cores.
#include "structured/mask_filler.h"

#include <gtest/gtest.h>

#include <deque>

#include "schema_cases.h"

namespace drift::structured {
namespace {

using testing::Json;

const tokenizer::Tokenizer& fixture_tokenizer() {
  static const tokenizer::Tokenizer tok = [] {
    auto t = tokenizer::Tokenizer::from_file(std::string(DRIFT_FIXTURES_DIR) + "/models/llama/tokenizer.json");
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return std::move(*t);
  }();
  return tok;
}

// A batch of constrained rows, each at a random point of a random document of its own random schema.
class Batch {
 public:
  Batch(const VocabIndex& index, size_t num_rows, std::mt19937& rng) : words_(size_t(index.words())) {
    masks_.assign(num_rows * words_, 0xdeadbeef);  // garbage a fill must clear
    for (size_t r = 0; r < num_rows; ++r) {
      auto compiled = CompiledSchema::compile(testing::random_schema(rng));
      EXPECT_TRUE(compiled.ok());
      const CompiledSchema& schema = schemas_.emplace_back(std::move(*compiled));
      const std::string doc = testing::random_document(schema.root(), rng);
      JsonMatcher& m = matchers_.emplace_back(schema.root(), 2);
      const size_t stop_at = doc.empty() ? 0 : rng() % (doc.size() + 1);
      for (size_t i = 0; i < stop_at; ++i) EXPECT_TRUE(m.advance(uint8_t(doc[i])));
      rows_.push_back({&m, r % 3 == 0 ? std::span<const int32_t>() : std::span<const int32_t>(stops_),
                       std::span<uint32_t>(masks_.data() + r * words_, words_)});
    }
  }

  std::span<const MaskFiller::Row> rows() const { return rows_; }
  const std::vector<uint32_t>& masks() const { return masks_; }

  // The reference: every row on this thread with one Scratch, as the engine did before the pool.
  std::vector<uint32_t> serial(const VocabIndex& index) const {
    std::vector<uint32_t> out(masks_.size());
    VocabIndex::Scratch scratch;
    for (size_t r = 0; r < rows_.size(); ++r)
      index.allowed(*rows_[r].matcher, rows_[r].stop_ids, std::span<uint32_t>(out.data() + r * words_, words_), scratch);
    return out;
  }

 private:
  size_t words_;
  const std::vector<int32_t> stops_ = {1, 4};
  std::deque<CompiledSchema> schemas_;  // the matchers point into them: no reallocation
  std::deque<JsonMatcher> matchers_;
  std::vector<MaskFiller::Row> rows_;
  std::vector<uint32_t> masks_;
};

TEST(MaskFiller, ThreadsGiveTheSerialMasksBitForBit) {
  const VocabIndex index(fixture_tokenizer(), fixture_tokenizer().vocab_size());
  std::vector<std::unique_ptr<MaskFiller>> fillers;
  for (int32_t threads : {1, 2, 3, 8}) fillers.push_back(std::make_unique<MaskFiller>(index, threads));
  std::mt19937 rng(17);
  for (int step = 0; step < 60; ++step) {
    const size_t num_rows = 1 + rng() % 80;
    for (const auto& filler : fillers) {
      Batch batch(index, num_rows, rng);
      filler->fill(batch.rows());
      ASSERT_EQ(batch.masks(), batch.serial(index)) << filler->num_threads() << " threads, " << num_rows << " rows, step " << step;
    }
  }
}

TEST(MaskFiller, ManyRowsOnMoreThreadsThanCores) {
  const VocabIndex index(fixture_tokenizer(), fixture_tokenizer().vocab_size());
  MaskFiller filler(index, 16);
  std::mt19937 rng(23);
  Batch batch(index, 1024, rng);
  const std::vector<uint32_t> expected = batch.serial(index);
  for (int round = 0; round < 20; ++round) {
    filler.fill(batch.rows());
    ASSERT_EQ(batch.masks(), expected) << "round " << round;
  }
  filler.fill({});  // a step with no constrained row
}

TEST(MaskFiller, DefaultThreadsAreBetweenOneAndEight) {
  EXPECT_GE(default_mask_threads(), 1);
  EXPECT_LE(default_mask_threads(), 8);
}

}  // namespace
}  // namespace drift::structured
