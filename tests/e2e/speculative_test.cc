// drift serve with prompt-lookup speculation: a greedy completion is the same as without it, and the
// spec_decode counters of /metrics move (per position too).
#include <gtest/gtest.h>

#include "test_server.h"

namespace drift::e2e {
namespace {

Json repeating_prompt() {
  std::vector<int32_t> prompt;
  for (int r = 0; r < 4; ++r)
    for (int32_t t : {31, 75, 402, 9, 188}) prompt.push_back(t);
  return {{"prompt", prompt}, {"max_tokens", 24}, {"ignore_eos", true}, {"temperature", 0}};
}

TEST(SpeculativeServe, SameCompletionAndSpecDecodeMetrics) {
  TestServer plain;
  const HttpReply want = post_json(plain, "/v1/completions", repeating_prompt());
  ASSERT_EQ(want.status, 200) << want.body;

  TestServer spec(TestServerOptions{.speculative = {.method = "ngram", .num_tokens = 3}});
  const HttpReply got = post_json(spec, "/v1/completions", repeating_prompt());
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json["choices"][0]["text"], want.json["choices"][0]["text"]);
  EXPECT_EQ(got.json["usage"]["completion_tokens"], 24);
  ASSERT_TRUE(wait_until_idle(spec.engine(), 5.0));
  const HttpReply metrics = get(spec, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  const auto drafts = metric_value(metrics.body, "drift:spec_decode_num_drafts_total");
  const auto drafted = metric_value(metrics.body, "drift:spec_decode_num_draft_tokens_total");
  const auto accepted = metric_value(metrics.body, "drift:spec_decode_num_accepted_tokens_total");
  ASSERT_TRUE(drafts && drafted && accepted) << metrics.body;
  EXPECT_GT(*drafts, 0);
  EXPECT_GE(*drafted, *drafts);
  EXPECT_LE(*accepted, *drafted);
  const auto first = metric_value(metrics.body, "drift:spec_decode_num_accepted_tokens_per_pos_total", "position=\"0\"");
  ASSERT_TRUE(first.has_value()) << metrics.body;
  EXPECT_LE(*first, *drafts);
}

// SpecPV with budgets smaller than the prompt: a request with "exact_verification" verifies every step in
// full (the plain server's greedy text, no partial verify counted); one without it verifies partially.
TEST(SpeculativeServe, ExactVerificationIsPerRequest) {
  std::vector<int32_t> prompt;
  while (prompt.size() < 130)
    for (int32_t t : {31, 75, 402, 9, 188, 77}) prompt.push_back(t);
  Json body = {{"prompt", prompt}, {"max_tokens", 24}, {"ignore_eos", true}, {"temperature", 0}};
  TestServer plain;
  const HttpReply want = post_json(plain, "/v1/completions", body);
  ASSERT_EQ(want.status, 200) << want.body;

  TestServer spec(TestServerOptions{
      .speculative = {.method = "ngram", .num_tokens = 3},
      .specpv = {.min_context = 64, .refresh = 8, .sink = 16, .retrieval = 16, .window = 16, .buffer = 8}});
  auto partial_verifies = [&] {
    EXPECT_TRUE(wait_until_idle(spec.engine(), 5.0));
    const HttpReply metrics = get(spec, "/metrics");
    return metric_value(metrics.body, "drift:spec_decode_num_partial_verifies_total").value_or(-1);
  };
  body["exact_verification"] = true;
  const HttpReply exact = post_json(spec, "/v1/completions", body);
  ASSERT_EQ(exact.status, 200) << exact.body;
  EXPECT_EQ(exact.json["choices"][0]["text"], want.json["choices"][0]["text"]);
  EXPECT_EQ(partial_verifies(), 0);

  body["exact_verification"] = false;
  ASSERT_EQ(post_json(spec, "/v1/completions", body).status, 200);
  EXPECT_GT(partial_verifies(), 0);

  body["exact_verification"] = "yes";
  const HttpReply bad = post_json(spec, "/v1/completions", body);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("exact_verification"), std::string::npos) << bad.body;
}

}  // namespace
}  // namespace drift::e2e
