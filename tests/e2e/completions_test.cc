// /v1/completions end to end: text and token-id prompts, streaming and not, n > 1, seeds, stop strings,
// logprobs and usage.
#include <gtest/gtest.h>

#include "test_server.h"
#include "tokenizer/tokenizer.h"

namespace drift::e2e {
namespace {

Json greedy(Json body) {
  body["temperature"] = 0;
  return body;
}

std::string text_of(const HttpReply& r, size_t choice = 0) { return r.json["choices"][choice]["text"].get<std::string>(); }

class CompletionsTest : public ::testing::Test {
 protected:
  TestServer server_;
};

TEST_F(CompletionsTest, NonStreamingReportsTextFinishReasonAndUsage) {
  const std::string prompt = "Hello world";
  const HttpReply r = post_json(server_, "/v1/completions",
                                greedy({{"model", "llama"}, {"prompt", prompt}, {"max_tokens", 8}, {"ignore_eos", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "text_completion");
  EXPECT_EQ(r.json["model"], "llama");
  EXPECT_EQ(r.json["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(r.json["choices"].size(), 1u);
  EXPECT_EQ(r.json["choices"][0]["index"], 0);
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length");
  // The engine tokenizes text prompts with the tokenizer's special tokens (BOS).
  const size_t prompt_tokens = server_.engine().tokenizer().encode(prompt, true).size();
  const Json& usage = r.json["usage"];
  EXPECT_EQ(usage["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(usage["completion_tokens"], 8);
  EXPECT_EQ(usage["total_tokens"], prompt_tokens + 8);
  EXPECT_TRUE(usage["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST_F(CompletionsTest, DefaultMaxTokensIs16) {
  const HttpReply r = post_json(server_, "/v1/completions", greedy({{"prompt", "Once"}, {"ignore_eos", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 16);
}

TEST_F(CompletionsTest, StreamingSendsOneTokenPerChunkThenUsageThenDone) {
  const Json body = greedy({{"prompt", "The cat sat"}, {"max_tokens", 12}, {"ignore_eos", true}, {"logprobs", 0}});
  const HttpReply full = post_json(server_, "/v1/completions", body);
  ASSERT_EQ(full.status, 200) << full.body;

  Json streaming = body;
  streaming["stream"] = true;
  streaming["stream_options"] = {{"include_usage", true}};
  const StreamReply s = post_stream(server_, "/v1/completions", streaming);
  ASSERT_EQ(s.status, 200) << s.error_body;
  ASSERT_TRUE(s.done);
  EXPECT_EQ(s.payloads.back(), "[DONE]");
  std::string text;
  int tokens = 0, finishes = 0;
  for (size_t i = 0; i + 1 < s.chunks.size(); ++i) {
    const Json& c = s.chunks[i];
    EXPECT_EQ(c["object"], "text_completion");
    ASSERT_EQ(c["choices"].size(), 1u);
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    const Json& choice = c["choices"][0];
    text += choice["text"].get<std::string>();
    if (!choice["logprobs"].is_null()) {
      // One token per chunk: each chunk's logprobs name exactly one token.
      EXPECT_EQ(choice["logprobs"]["tokens"].size(), 1u);
      ++tokens;
    }
    if (!choice["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(choice["finish_reason"], "length");
      EXPECT_EQ(i + 2, s.chunks.size()) << "the finishing chunk is the last before usage";
    }
  }
  EXPECT_EQ(tokens, 12);
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(text, text_of(full));
  const Json& usage_chunk = s.chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 12);
  for (const char* key : {"prompt_tokens", "completion_tokens", "total_tokens"})
    EXPECT_EQ(usage_chunk["usage"][key], full.json["usage"][key]) << key;
}

TEST_F(CompletionsTest, StreamingWithoutIncludeUsageSendsNoUsageChunk) {
  const StreamReply s = post_stream(server_, "/v1/completions",
                                    greedy({{"prompt", "A"}, {"max_tokens", 3}, {"ignore_eos", true}, {"stream", true}}));
  ASSERT_EQ(s.status, 200);
  ASSERT_TRUE(s.done);
  for (const Json& c : s.chunks) {
    EXPECT_FALSE(c.contains("usage"));
    EXPECT_EQ(c["choices"].size(), 1u);
  }
}

TEST_F(CompletionsTest, TokenIdPromptsAreUsedAsGiven) {
  const std::vector<int32_t> ids = {10, 20, 30, 40, 50};
  const HttpReply r = post_json(server_, "/v1/completions", greedy({{"prompt", ids}, {"max_tokens", 4}, {"ignore_eos", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], 5);
}

TEST_F(CompletionsTest, PromptListsGiveNChoicesPerPromptInOrder) {
  const Json strings = greedy({{"prompt", {"first prompt", "second"}}, {"n", 2}, {"max_tokens", 5}, {"ignore_eos", true}});
  const HttpReply r = post_json(server_, "/v1/completions", strings);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["choices"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.json["choices"][i]["index"], i);
  // Greedy: both choices of a prompt agree, and each matches the prompt sent alone.
  EXPECT_EQ(text_of(r, 0), text_of(r, 1));
  EXPECT_EQ(text_of(r, 2), text_of(r, 3));
  const HttpReply second = post_json(server_, "/v1/completions", greedy({{"prompt", "second"}, {"max_tokens", 5}, {"ignore_eos", true}}));
  EXPECT_EQ(text_of(r, 2), text_of(second));
  const auto& tok = server_.engine().tokenizer();
  const size_t prompt_tokens = tok.encode("first prompt", true).size() + tok.encode("second", true).size();
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], prompt_tokens) << "each prompt counts once, not once per choice";
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 20);

  const HttpReply lists = post_json(server_, "/v1/completions",
                                    greedy({{"prompt", {{5, 6, 7}, {8, 9}}}, {"max_tokens", 2}, {"ignore_eos", true}}));
  ASSERT_EQ(lists.status, 200) << lists.body;
  EXPECT_EQ(lists.json["choices"].size(), 2u);
  EXPECT_EQ(lists.json["usage"]["prompt_tokens"], 5);
}

TEST_F(CompletionsTest, SeedsMakeSamplingReproducible) {
  const auto sample = [&](uint64_t seed, int n) {
    return post_json(server_, "/v1/completions",
                     {{"prompt", "Random"}, {"temperature", 1.0}, {"seed", seed}, {"n", n}, {"max_tokens", 16}, {"ignore_eos", true}});
  };
  const HttpReply a = sample(42, 3), b = sample(42, 3), c = sample(43, 3);
  ASSERT_EQ(a.status, 200) << a.body;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(text_of(a, i), text_of(b, i)) << "choice " << i;
  EXPECT_NE(text_of(a, 0), text_of(c, 0));
  // Choices of one request sample with different seeds.
  EXPECT_FALSE(text_of(a, 0) == text_of(a, 1) && text_of(a, 1) == text_of(a, 2));
}

TEST_F(CompletionsTest, StopStringEndsTheTextBeforeIt) {
  const Json body = greedy({{"prompt", "Tell me"}, {"max_tokens", 40}, {"ignore_eos", true}});
  const HttpReply full = post_json(server_, "/v1/completions", body);
  ASSERT_EQ(full.status, 200);
  const std::string text = text_of(full);
  ASSERT_GE(text.size(), 8u);
  const std::string stop = text.substr(text.size() / 2, 3);
  Json with_stop = body;
  with_stop["stop"] = Json::array({"never appears \x01", stop});
  const HttpReply r = post_json(server_, "/v1/completions", with_stop);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(text_of(r), text.substr(0, text.find(stop)));
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r.json["choices"][0]["stop_reason"], stop);

  Json streamed = with_stop;
  streamed["stream"] = true;
  const StreamReply s = post_stream(server_, "/v1/completions", streamed);
  std::string joined;
  for (const Json& c : s.chunks) joined += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(joined, text_of(r));
}

TEST_F(CompletionsTest, LogprobsListTheChosenAndTopTokens) {
  const HttpReply r = post_json(server_, "/v1/completions",
                                greedy({{"prompt", "Numbers"}, {"max_tokens", 6}, {"ignore_eos", true}, {"logprobs", 3}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& lp = r.json["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  ASSERT_EQ(lp["text_offset"].size(), 6u);
  std::string joined;
  for (size_t i = 0; i < 6; ++i) {
    const double chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.0);
    const Json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 3u);
    double best = -1e30;
    for (const auto& [token, value] : top.items()) best = std::max(best, value.get<double>());
    EXPECT_NEAR(chosen, best, 1e-4) << "greedy picks the most likely token";
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, text_of(r));
}

TEST_F(CompletionsTest, ExtensionsAndUnknownFieldsAreAccepted) {
  const HttpReply r = post_json(server_, "/v1/completions",
                                {{"prompt", "x"},
                                 {"max_tokens", 4},
                                 {"temperature", 0.7},
                                 {"top_p", 0.9},
                                 {"top_k", 20},
                                 {"min_p", 0.05},
                                 {"repetition_penalty", 1.1},
                                 {"presence_penalty", 0.5},
                                 {"frequency_penalty", 0.5},
                                 {"stop_token_ids", {1, 4}},
                                 {"user", "someone"},
                                 {"seed", -7},
                                 {"stop", nullptr},
                                 {"logit_bias", Json::object()},
                                 {"best_of", 1},
                                 {"some_future_field", {{"nested", true}}}});
  EXPECT_EQ(r.status, 200) << r.body;
}

// As OpenAI and vLLM answer: an explicit max_tokens the context cannot hold is a 400 naming both counts;
// "clamp_max_tokens" (Drift's extension) cuts it to what is left instead.
TEST_F(CompletionsTest, MaxTokensBeyondTheContextIsRefusedUnlessClamped) {
  const Json body = greedy({{"prompt", std::vector<int32_t>(250, 9)}, {"max_tokens", 100}, {"ignore_eos", true}});
  const HttpReply refused = post_json(server_, "/v1/completions", body);
  ASSERT_EQ(refused.status, 400) << refused.body;
  const std::string message = refused.json["error"]["message"];
  EXPECT_NE(message.find("maximum context length is 256 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("you requested 350 tokens (250 in the messages, 100 in the completion)"), std::string::npos)
      << message;

  Json clamped_body = body;
  clamped_body["clamp_max_tokens"] = true;
  const HttpReply clamped = post_json(server_, "/v1/completions", clamped_body);
  ASSERT_EQ(clamped.status, 200) << clamped.body;
  EXPECT_EQ(clamped.json["usage"]["completion_tokens"], 6);
  EXPECT_EQ(clamped.json["choices"][0]["finish_reason"], "length");

  // A limit that fits is untouched.
  Json fits = body;
  fits["max_tokens"] = 6;
  EXPECT_EQ(post_json(server_, "/v1/completions", fits).status, 200);
}

}  // namespace
}  // namespace drift::e2e
