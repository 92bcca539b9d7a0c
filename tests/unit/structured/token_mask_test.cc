// The token mask equals the brute force (every token's bytes fed to a copy of the matcher) at every state
// of random documents, on the fixture tokenizer.
#include "structured/token_mask.h"

#include <gtest/gtest.h>

#include "schema_cases.h"

namespace drift::structured {
namespace {

using testing::Json;

TEST(TokenMask, EqualsTheBruteForceAlongRandomDocuments) {
  auto tok = tokenizer::Tokenizer::from_file(std::string(DRIFT_FIXTURES_DIR) + "/models/llama/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const int32_t vocab = tok->vocab_size();
  const VocabIndex index(*tok, vocab);
  const std::vector<int32_t> stops = {1};
  std::mt19937 rng(7);
  std::vector<uint32_t> mask(size_t(index.words()));
  VocabIndex::Scratch scratch;
  int states = 0;
  for (int i = 0; i < 80; ++i) {
    const Json schema = testing::random_schema(rng);
    auto compiled = CompiledSchema::compile(schema);
    ASSERT_TRUE(compiled.ok());
    const std::string doc = testing::random_document(compiled->root(), rng);
    JsonMatcher m(compiled->root(), 2);
    for (size_t pos = 0; pos <= doc.size(); ++pos) {
      index.allowed(m, stops, mask, scratch);
      ++states;
      for (int32_t id = 0; id < vocab; ++id) {
        bool expected = false;
        if (!tok->is_special(id) && !tok->token_bytes(id).empty()) {
          JsonMatcher trial = m;
          expected = trial.advance(tok->token_bytes(id));
        }
        if (id == 1 && m.can_end()) expected = true;
        const bool got = mask[size_t(id) / 32] >> (id % 32) & 1;
        ASSERT_EQ(got, expected) << "token " << id << " '" << tok->token_bytes(id) << "' after '" << doc.substr(0, pos)
                                 << "' schema " << schema;
      }
      if (pos < doc.size()) {
        ASSERT_TRUE(m.advance(uint8_t(doc[pos])));
      }
    }
  }
  EXPECT_GT(states, 300);
}

}  // namespace
}  // namespace drift::structured
