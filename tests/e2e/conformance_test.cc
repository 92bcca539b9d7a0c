// What an OpenAI client expects beyond the happy path, each found missing by driving drift serve with the
// official client: a port already in use, /v1/models/{id}, error codes as strings or null, the Bearer
// scheme in any case, JSON-only bodies (415), and the access log's one line per call.
#include <gtest/gtest.h>

#include "access_log_capture.h"
#include "test_server.h"

namespace drift::e2e {
namespace {

TEST(ConformanceTest, ASecondServerOnAPortInUseFailsToBind) {
  TestServer first;
  server::ServerOptions options;
  options.port = first.port();
  auto second = server::OpenAiServer::create(first.engine(), options);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  const auto bound = (*second)->bind();
  ASSERT_FALSE(bound.ok()) << "a second server bound port " << first.port();
  EXPECT_NE(bound.status().message().find("address already in use"), std::string::npos) << bound.status().message();
  EXPECT_NE(bound.status().message().find(std::to_string(first.port())), std::string::npos) << bound.status().message();
  // The first one still answers.
  EXPECT_EQ(get(first, "/health").status, 200);
}

TEST(ConformanceTest, OneModelByIdAndUnknownIdsAreNotFound) {
  TestServer server;
  const HttpReply listed = get(server, "/v1/models");
  ASSERT_EQ(listed.status, 200);
  const Json& model = listed.json["data"][0];
  const HttpReply one = get(server, "/v1/models/" + model["id"].get<std::string>());
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.json["id"], model["id"]);
  EXPECT_EQ(one.json["object"], "model");
  EXPECT_EQ(one.json["max_model_len"], model["max_model_len"]);
  const HttpReply missing = get(server, "/v1/models/no-such-model");
  ASSERT_EQ(missing.status, 404) << missing.body;
  EXPECT_EQ(missing.json["error"]["code"], "model_not_found");
  EXPECT_EQ(missing.json["error"]["type"], "not_found_error");
}

TEST(ConformanceTest, TheBearerSchemeIsCaseInsensitive) {
  TestServer server(TestServerOptions{.api_key = "sekrit"});
  for (const char* header : {"Bearer sekrit", "bearer sekrit", "BEARER  sekrit "}) {
    httplib::Client c = server.client();
    const auto r = c.Get("/v1/models", httplib::Headers{{"Authorization", header}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << "'" << header << "'";
  }
  for (const char* header : {"Basic sekrit", "Bearer", "Bearer sekrit2", "Bearersekrit"}) {
    httplib::Client c = server.client();
    const auto r = c.Get("/v1/models", httplib::Headers{{"Authorization", header}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << "'" << header << "'";
  }
}

TEST(ConformanceTest, BodiesMustBeJson) {
  TestServer server;
  const std::string body = R"({"prompt": "hi", "max_tokens": 2})";
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", ""}) {
    httplib::Client c = server.client();
    const auto r = c.Post("/v1/completions", body, type);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 415) << "'" << type << "': " << r->body;
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("application/json"), std::string::npos) << r->body;
    EXPECT_TRUE(j["error"]["code"].is_null());
  }
  for (const char* type : {"application/json", "application/json; charset=utf-8", "Application/JSON"}) {
    httplib::Client c = server.client();
    const auto r = c.Post("/v1/completions", body, type);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << "'" << type << "': " << r->body;
  }
}

TEST(ConformanceTest, ChatWithoutALimitFillsTheContextButAnExplicitOneMustFit) {
  TestServer server(TestServerOptions{.model_dir = chat_model_dir()});
  const Json messages = {{{"role", "user"}, {"content", "hello"}}};
  const HttpReply open = post_json(server, "/v1/chat/completions",
                                   {{"messages", messages}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(open.status, 200) << open.body;
  EXPECT_EQ(open.json["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(open.json["usage"]["total_tokens"], 256) << "the fixture's context is 256 tokens";
  const HttpReply too_many = post_json(server, "/v1/chat/completions",
                                       {{"messages", messages}, {"max_completion_tokens", 1000}});
  ASSERT_EQ(too_many.status, 400) << too_many.body;
  EXPECT_NE(too_many.json["error"]["message"].get<std::string>().find("1000 in the completion"), std::string::npos);
}

TEST(ConformanceTest, AccessLogWritesOneLinePerCall) {
  TestServer server(TestServerOptions{.access_log = true});
  // The first call creates the "access" logger; capture what it writes from the second on.
  ASSERT_EQ(get(server, "/health").status, 200);
  ASSERT_EQ(post_json(server, "/v1/completions", {{"prompt", "warm"}, {"max_tokens", 1}}).status, 200);
  AccessLogCapture log;
  ASSERT_TRUE(log.attached());

  const HttpReply ok = post_json(server, "/v1/completions", {{"prompt", "hello"}, {"max_tokens", 3}, {"ignore_eos", true}});
  ASSERT_EQ(ok.status, 200);
  const StreamReply streamed = post_stream(server, "/v1/completions",
                                           {{"prompt", "hello"}, {"max_tokens", 2}, {"ignore_eos", true}, {"stream", true}});
  ASSERT_TRUE(streamed.done);
  log.wait_for_lines(2);
  ASSERT_EQ(post_json(server, "/v1/completions", {{"prompt", 5}}).status, 400);
  const std::vector<std::string> lines = log.wait_for_lines(3);
  ASSERT_EQ(lines.size(), 3u);
  const std::string id = ok.json["id"];
  EXPECT_EQ(lines[0].rfind(id + " \"POST /v1/completions\" 200 full prompt_tokens=", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("completion_tokens=3 "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("finish=length"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" ttft=0."), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("200 stream"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("completion_tokens=2 "), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind("- \"POST /v1/completions\" 400 full", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find("error=\"'prompt' must be"), std::string::npos) << lines[2];
}

TEST(ConformanceTest, AccessRecordsAsJson) {
  server::AccessRecord r;
  r.id = "cmpl-1";
  r.method = "POST";
  r.path = "/v1/completions";
  Output a, b;
  a.usage = {7, 3, 4};
  a.timings.time_to_first_token_s = 0.25;
  a.finish_reason = FinishReason::kLength;
  b.usage = {7, 2, 4};
  b.timings.time_to_first_token_s = 0.125;
  b.finish_reason = FinishReason::kStop;
  server::add_outputs(r, {a, b});
  const Json j = Json::parse(server::access_json(r));
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["prompt_tokens"], 7) << "each prompt counts once";
  EXPECT_EQ(j["completion_tokens"], 5);
  EXPECT_EQ(j["cached_tokens"], 4);
  EXPECT_EQ(j["ttft_s"], 0.125);
  EXPECT_EQ(j["finish_reason"], "length,stop");
  EXPECT_FALSE(j.contains("error"));
}

}  // namespace
}  // namespace drift::e2e

namespace drift::e2e {
namespace {

TEST(StructuredOutputApi, JsonSchemaRepliesParseFullAndStreamed) {
  TestServer server(TestServerOptions{.model_dir = chat_model_dir()});
  const Json schema = Json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}, "required": ["name", "tags"],
      "additionalProperties": false})");
  const Json body = {{"messages", {{{"role", "user"}, {"content", "json please"}}}}, {"temperature", 1}, {"seed", 5},
                     {"max_tokens", 120},
                     {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"schema", schema}}}}}};
  const HttpReply full = post_json(server, "/v1/chat/completions", body);
  ASSERT_EQ(full.status, 200) << full.body;
  const Json value = Json::parse(full.json["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(value.is_object()) << full.body;
  EXPECT_TRUE(value["name"].is_string());
  EXPECT_LE(value["tags"].size(), 2u);
  EXPECT_EQ(full.json["choices"][0]["finish_reason"], "stop");

  Json streaming = body;
  streaming["stream"] = true;
  const StreamReply s = post_stream(server, "/v1/chat/completions", streaming);
  ASSERT_TRUE(s.done);
  std::string text;
  for (const Json& c : s.chunks)
    if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(text, full.json["choices"][0]["message"]["content"]) << "same seed, same reply";

  // Any object: free-text keys may run past max_tokens on a random model; every reply that ends by
  // itself must be an object.
  int ended = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    const Json object_only = {{"prompt", "x"}, {"max_tokens", 200}, {"seed", seed}, {"response_format", {{"type", "json_object"}}}};
    const HttpReply any = post_json(server, "/v1/completions", object_only);
    ASSERT_EQ(any.status, 200) << any.body;
    if (any.json["choices"][0]["finish_reason"] != "stop") continue;
    ++ended;
    EXPECT_TRUE(Json::parse(any.json["choices"][0]["text"].get<std::string>(), nullptr, false).is_object()) << any.body;
  }
  EXPECT_GE(ended, 1);

  Json unsupported = body;
  unsupported["response_format"]["json_schema"]["schema"] = {{"type", "string"}, {"format", "email"}};
  const HttpReply refused = post_json(server, "/v1/chat/completions", unsupported);
  ASSERT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.json["error"]["message"].get<std::string>().find("'format'"), std::string::npos) << refused.body;
}

}  // namespace
}  // namespace drift::e2e
