// /v1/chat/completions end to end: template rendering (BOS once), streaming and not, logprobs, and the
// refusal when a model has no chat template.
#include <gtest/gtest.h>

#include "test_server.h"
#include "tokenizer/tokenizer.h"

namespace drift::e2e {
namespace {

Json user_says(const std::string& text, Json extra = Json::object()) {
  Json body = {{"model", "llama"}, {"messages", {{{"role", "user"}, {"content", text}}}}, {"temperature", 0}};
  for (const auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

class ChatTest : public ::testing::Test {
 protected:
  TestServer server_{TestServerOptions{.model_dir = chat_model_dir()}};
};

TEST(ChatWithoutTemplateTest, AnswersBadRequestNamingTheProblem) {
  TestServer server;
  const HttpReply r = post_json(server, "/v1/chat/completions", user_says("Hi"));
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["type"], "invalid_request_error");
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find("chat template"), std::string::npos) << r.body;
}

TEST_F(ChatTest, RendersTheTemplateWithBosOnce) {
  const HttpReply r = post_json(server_, "/v1/chat/completions", user_says("Hi there", {{"max_tokens", 5}, {"ignore_eos", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "chat.completion");
  EXPECT_EQ(r.json["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const Json& choice = r.json["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_TRUE(choice["message"]["content"].is_string());
  EXPECT_EQ(choice["finish_reason"], "length");
  // The template writes BOS itself; tokenizing again with special tokens would add a second one.
  const std::vector<int32_t> expected = server_.engine().tokenizer().encode(expected_chat_prompt("Hi there"), false);
  ASSERT_EQ(expected.front(), 0);
  EXPECT_EQ(std::count(expected.begin(), expected.end(), 0), 1);
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], expected.size());
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 5);

  // The same prompt as token ids through /v1/completions continues identically (greedy).
  const HttpReply same = post_json(server_, "/v1/completions",
                                   {{"prompt", expected}, {"max_tokens", 5}, {"ignore_eos", true}, {"temperature", 0}});
  ASSERT_EQ(same.status, 200);
  EXPECT_EQ(same.json["choices"][0]["text"], choice["message"]["content"]);
}

TEST_F(ChatTest, MaxCompletionTokensWinsOverMaxTokens) {
  const HttpReply r = post_json(server_, "/v1/chat/completions",
                                user_says("Hi", {{"max_tokens", 9}, {"max_completion_tokens", 3}, {"ignore_eos", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 3);
}

TEST_F(ChatTest, TextPartsReadAsOneString) {
  Json parts = user_says("");
  parts["messages"][0]["content"] = {{{"type", "text"}, {"text", "Hi there"}}};
  parts["max_tokens"] = 4;
  const HttpReply a = post_json(server_, "/v1/chat/completions", parts);
  const HttpReply b = post_json(server_, "/v1/chat/completions", user_says("Hi there", {{"max_tokens", 4}}));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json["choices"][0]["message"], b.json["choices"][0]["message"]);
  EXPECT_EQ(a.json["usage"]["prompt_tokens"], b.json["usage"]["prompt_tokens"]);
}

TEST_F(ChatTest, StreamingSendsARoleChunkThenContentThenUsage) {
  const Json body = user_says("Stream please", {{"max_tokens", 10}, {"ignore_eos", true}});
  const HttpReply full = post_json(server_, "/v1/chat/completions", body);
  ASSERT_EQ(full.status, 200) << full.body;
  Json streaming = body;
  streaming["stream"] = true;
  streaming["stream_options"] = {{"include_usage", true}};
  const StreamReply s = post_stream(server_, "/v1/chat/completions", streaming);
  ASSERT_EQ(s.status, 200) << s.error_body;
  ASSERT_TRUE(s.done);
  ASSERT_GE(s.chunks.size(), 12u);
  // As OpenAI streams: the first chunk holds the role and empty content, and no token.
  const Json& first = s.chunks[0]["choices"][0];
  EXPECT_EQ(first["delta"], Json({{"role", "assistant"}, {"content", ""}})) << s.chunks[0];
  EXPECT_TRUE(first["finish_reason"].is_null());
  std::string content;
  for (size_t i = 0; i + 1 < s.chunks.size(); ++i) {
    const Json& c = s.chunks[i];
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    const Json& delta = c["choices"][0]["delta"];
    EXPECT_EQ(delta.contains("role"), i == 0) << "the role comes once, in its own chunk";
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(s.chunks[s.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(content, full.json["choices"][0]["message"]["content"]);
  EXPECT_TRUE(s.chunks.back()["choices"].empty());
  // cached_tokens may differ: the second call finds the first one's prompt in the prefix cache.
  for (const char* key : {"prompt_tokens", "completion_tokens", "total_tokens"})
    EXPECT_EQ(s.chunks.back()["usage"][key], full.json["usage"][key]) << key;
}

TEST_F(ChatTest, LogprobsCarryTokensBytesAndAlternatives) {
  const HttpReply r = post_json(server_, "/v1/chat/completions",
                                user_says("Hi", {{"max_tokens", 4}, {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 2}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& content = r.json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (const Json& entry : content) {
    EXPECT_TRUE(entry["token"].is_string());
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(entry["bytes"].is_array());
    ASSERT_EQ(entry["top_logprobs"].size(), 2u);
    EXPECT_NEAR(entry["top_logprobs"][0]["logprob"].get<double>(), entry["logprob"].get<double>(), 1e-4);
    EXPECT_GE(entry["top_logprobs"][0]["logprob"].get<double>(), entry["top_logprobs"][1]["logprob"].get<double>());
  }
  const HttpReply without = post_json(server_, "/v1/chat/completions", user_says("Hi", {{"max_tokens", 2}}));
  EXPECT_TRUE(without.json["choices"][0]["logprobs"].is_null());
}

TEST_F(ChatTest, ChatNChoicesWithSeed) {
  const Json body = user_says("Pick", {{"n", 2}, {"temperature", 1.0}, {"seed", 7}, {"max_tokens", 8}, {"ignore_eos", true}});
  const HttpReply a = post_json(server_, "/v1/chat/completions", body);
  const HttpReply b = post_json(server_, "/v1/chat/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(a.json["choices"].size(), 2u);
  EXPECT_EQ(a.json["choices"], b.json["choices"]);
  EXPECT_EQ(a.json["usage"]["completion_tokens"], 16);
}

}  // namespace
}  // namespace drift::e2e
