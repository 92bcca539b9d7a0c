#include "sample/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "chi_square.h"

namespace drift::sample {
namespace {

void expect_block(PhiloxBlock got, PhiloxBlock want) {
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.w[i], want.w[i]) << "word " << i;
}

// Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter (4 words), key (2), expected (4).
TEST(Philox4x32_10, MatchesRandom123KnownAnswers) {
  expect_block(philox4x32_10({{0, 0, 0, 0}}, 0, 0), {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  expect_block(philox4x32_10({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
               {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  expect_block(philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
               {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

// The mapping documented in random.h, which a CUDA sampler has to reproduce word for word.
TEST(UniformFor, IsTheTop24BitsOfWordZeroForCounterPositionAndKeySeed) {
  const uint64_t seeds[] = {0, 1, 0x123456789abcdef0ull, ~0ull};
  const uint64_t positions[] = {0, 5, 0xfedcba9876543210ull};
  for (uint64_t seed : seeds) {
    for (uint64_t position : positions) {
      const PhiloxBlock out = philox4x32_10({{uint32_t(position), uint32_t(position >> 32), 0, 0}}, uint32_t(seed),
                                            uint32_t(seed >> 32));
      EXPECT_EQ(uniform_for(seed, position), float(out.w[0] >> 8) / 16777216.0f) << seed << " " << position;
    }
  }
}

TEST(UniformFor, IsUniformOnTheUnitInterval) {
  constexpr int kBins = 64;
  constexpr int64_t kDraws = 1 << 16;
  std::vector<int64_t> counts(kBins, 0);
  float lo = 1.0f, hi = 0.0f;
  for (int64_t i = 0; i < kDraws; ++i) {
    const float u = uniform_for(42, uint64_t(i));
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    ++counts[size_t(u * kBins)];
  }
  EXPECT_GE(lo, 0.0f);
  EXPECT_LT(hi, 1.0f);
  const std::vector<double> probs(kBins, 1.0 / kBins);
  EXPECT_LT(testing::chi_square(counts, probs, kDraws), testing::chi_square_quantile(kBins - 1, testing::kZ999));
}

// 100 draws of 24 bits collide with probability about 100^2 / 2^25 = 3e-4 for a random stream.
TEST(UniformFor, DiffersAcrossPositionsAndAcrossSeeds) {
  std::vector<float> by_position, by_seed;
  for (uint64_t i = 0; i < 100; ++i) {
    by_position.push_back(uniform_for(7, i));
    by_seed.push_back(uniform_for(i, 7));
  }
  for (auto* values : {&by_position, &by_seed}) {
    std::sort(values->begin(), values->end());
    EXPECT_EQ(std::adjacent_find(values->begin(), values->end()), values->end());
  }
  EXPECT_NE(uniform_for(1ull << 32, 0), uniform_for(0, 0));  // the seed's high word takes part
  EXPECT_NE(uniform_for(0, 1ull << 32), uniform_for(0, 0));  // and the position's
}

}  // namespace
}  // namespace drift::sample
