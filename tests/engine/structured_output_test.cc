// Structured output through the engine on the fixture model: 100 random schemas, each with a greedy and a
// sampled request, batched together; every reply that ends by itself is JSON that validates. The model
// is random, so anything it writes is the mask's doing. Masks filled on 4 threads give the same replies.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine_test_util.h"
#include "schema_cases.h"

namespace drift::testing {
namespace {

using Json = nlohmann::json;

// A greedy and a seeded sampled request for each of `num_schemas` random schemas (appended to `schemas`).
std::vector<Request> schema_requests(std::vector<Json>& schemas, int num_schemas) {
  std::mt19937 rng(11);
  std::vector<Request> requests;
  for (int i = 0; i < num_schemas; ++i) {
    schemas.push_back(structured::testing::random_schema(rng));
    for (int sampled = 0; sampled < 2; ++sampled) {
      Request r = greedy_request({3, 17, 42, 5 + i}, 200);
      r.json_schema = schemas.back().dump();
      if (sampled) {
        r.sampling.temperature = 1.0f;
        r.sampling.seed = uint64_t(i);
      }
      requests.push_back(std::move(r));
    }
  }
  return requests;
}

std::vector<Collected> run_with_mask_threads(const std::vector<Request>& requests, int32_t mask_threads) {
  EngineConfig config = fixture_engine_config();
  config.kv_cache_bytes = 64 << 20;
  config.mask_threads = mask_threads;
  auto engine = Engine::create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<Collected> results = run_all(**engine, requests);
  EXPECT_EQ(wait_until_idle(**engine).kv_blocks_used, 0);
  return results;
}

TEST(StructuredOutput, RandomSchemasGiveValidJson) {
  std::vector<Json> schemas;
  const std::vector<Collected> results = run_with_mask_threads(schema_requests(schemas, 100), 1);
  int complete = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const Collected& c = results[i];
    const Json& schema = schemas[i / 2];
    ASSERT_NE(c.final.finish_reason, FinishReason::kError) << c.final.error.to_string() << " after '" << c.text << "' schema " << schema;
    if (c.final.finish_reason != FinishReason::kStop) continue;  // max_tokens cut it: no promise
    ++complete;
    const Json value = Json::parse(c.text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << "not JSON: " << c.text << "\nschema " << schema;
    EXPECT_TRUE(structured::testing::validates(value, schema, schema)) << c.text << "\nschema " << schema;
  }
  EXPECT_GE(complete, 190) << "most replies must finish within 200 tokens";
}

// Masks filled on a pool of threads are the serial ones, so every reply is the same token for token.
TEST(StructuredOutput, MaskThreadsGiveTheSameReplies) {
  std::vector<Json> schemas;
  const std::vector<Request> requests = schema_requests(schemas, 40);
  const std::vector<Collected> serial = run_with_mask_threads(requests, 1);
  const std::vector<Collected> pooled = run_with_mask_threads(requests, 4);
  ASSERT_EQ(serial.size(), pooled.size());
  for (size_t i = 0; i < serial.size(); ++i) {
    EXPECT_EQ(pooled[i].tokens, serial[i].tokens) << "request " << i << " schema " << schemas[i / 2];
    EXPECT_EQ(pooled[i].final.finish_reason, serial[i].final.finish_reason);
  }
}

TEST(StructuredOutput, BadSchemasAreRefusedAtSubmit) {
  auto engine = Engine::create(fixture_engine_config());
  ASSERT_TRUE(engine.ok());
  Request r = greedy_request({1, 2}, 8);
  r.json_schema = R"({"type": "string", "pattern": "a+"})";
  const auto refused = (*engine)->submit(r, [](const Output&) {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'pattern'"), std::string::npos) << refused.status().to_string();
  r.json_schema = "{not json";
  EXPECT_FALSE((*engine)->submit(r, [](const Output&) {}).ok());
}

}  // namespace
}  // namespace drift::testing
