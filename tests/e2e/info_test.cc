// GET /v1/models, /health and /metrics, and the API key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "test_server.h"

namespace drift::e2e {
namespace {

TEST(InfoTest, ModelsListsTheServedModel) {
  TestServer server;
  const HttpReply r = get(server, "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "list");
  ASSERT_EQ(r.json["data"].size(), 1u);
  const Json& m = r.json["data"][0];
  EXPECT_EQ(m["id"], "llama");
  EXPECT_EQ(m["object"], "model");
  EXPECT_EQ(m["root"], std::filesystem::absolute(fixture_model_dir()).lexically_normal().string());
  EXPECT_EQ(m["max_model_len"], 256);
  EXPECT_TRUE(m["created"].is_number_integer());
  // The folder is accepted as the model's name too, as vllm bench serve sends it.
  const HttpReply by_root = post_json(server, "/v1/completions", {{"model", m["root"]}, {"prompt", "x"}, {"max_tokens", 1}});
  EXPECT_EQ(by_root.status, 200) << by_root.body;
}

TEST(InfoTest, HealthAnswers) {
  TestServer server;
  const HttpReply r = get(server, "/health");
  EXPECT_EQ(r.status, 200);
}

// Checks the text exposition format: HELP/TYPE lines, sample lines `name{labels} value`, histogram
// buckets cumulative and ending at +Inf with the count.
void expect_valid_exposition(const std::string& text) {
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([a-zA-Z_]+="[^"]*"(,[a-zA-Z_]+="[^"]*")*)\} (-?[0-9.e+-]+|\+Inf|NaN)$)");
  const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  std::istringstream lines(text);
  std::set<std::string> families;
  std::string histogram;
  double last_bucket = -1;
  int samples = 0;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(families.insert(m[1]).second) << "family declared twice: " << line;
      histogram = m[2] == "histogram" ? std::string(m[1]) : "";
      last_bucket = -1;
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: '" << line << "'";
    ++samples;
    const std::string name = m[1];
    const double value = std::stod(m[4]);
    if (!histogram.empty() && name == histogram + "_bucket") {
      EXPECT_GE(value, last_bucket) << "buckets are cumulative: " << line;
      last_bucket = value;
    } else if (!histogram.empty() && name == histogram + "_count") {
      EXPECT_EQ(value, last_bucket) << "the +Inf bucket equals the count: " << line;
    } else if (histogram.empty()) {
      EXPECT_TRUE(families.count(name)) << "sample before its TYPE: " << line;
    }
  }
  EXPECT_GT(samples, 20);
}

TEST(InfoTest, MetricsAreValidPrometheusTextAndMove) {
  TestServer server;
  const HttpReply before = get(server, "/metrics");
  ASSERT_EQ(before.status, 200);
  expect_valid_exposition(before.body);
  for (const char* name : {"drift:num_requests_running", "drift:num_requests_waiting", "drift:kv_cache_usage_perc",
                           "drift:prefix_cache_queries_total", "drift:prefix_cache_hits_total", "drift:prompt_tokens_total",
                           "drift:generation_tokens_total", "drift:num_preemptions_total", "drift:num_requests_shed_total",
                           "drift:request_success_total", "drift:step_phase_seconds_total",
                           "drift:time_to_first_token_seconds_count", "drift:time_per_output_token_seconds_count",
                           "drift:e2e_request_latency_seconds_count"})
    EXPECT_TRUE(metric_value(before.body, name).has_value()) << name;

  const std::vector<int32_t> prompt = {11, 12, 13, 14, 15, 16, 17};
  for (int i = 0; i < 2; ++i) {
    const HttpReply r = post_json(server, "/v1/completions",
                                  {{"prompt", prompt}, {"max_tokens", 5}, {"ignore_eos", true}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.body;
  }
  ASSERT_TRUE(wait_until_idle(server.engine(), 5.0));
  const HttpReply after = get(server, "/metrics");
  expect_valid_exposition(after.body);
  const auto delta = [&](const std::string& name, const std::string& label = {}) {
    return *metric_value(after.body, name, label) - *metric_value(before.body, name, label);
  };
  EXPECT_EQ(delta("drift:generation_tokens_total"), 10);
  EXPECT_EQ(delta("drift:prompt_tokens_total"), 14);
  EXPECT_EQ(delta("drift:request_success_total", "finished_reason=\"length\""), 2);
  EXPECT_EQ(delta("drift:time_to_first_token_seconds_count"), 2);
  EXPECT_EQ(delta("drift:time_per_output_token_seconds_count"), 8);
  EXPECT_EQ(delta("drift:e2e_request_latency_seconds_count"), 2);
  EXPECT_GT(delta("drift:prefix_cache_queries_total"), 0);
  for (const char* phase : {"plan", "launch", "apply"})
    EXPECT_GT(delta("drift:step_phase_seconds_total", fmt::format("phase=\"{}\"", phase)), 0) << phase;
  EXPECT_EQ(*metric_value(after.body, "drift:num_requests_running"), 0);
  EXPECT_EQ(*metric_value(after.body, "drift:kv_cache_usage_perc"), 0);
}

TEST(InfoTest, ApiKeyGuardsTheApiButNotHealth) {
  TestServer server(TestServerOptions{.api_key = "sekrit"});
  const Json body = {{"prompt", "x"}, {"max_tokens", 2}};
  for (const std::string key : {"", "wrong"}) {
    const HttpReply r = post_json(server, "/v1/completions", body, key);
    ASSERT_EQ(r.status, 401) << "key '" << key << "'";
    EXPECT_EQ(r.json["error"]["type"], "authentication_error");
    EXPECT_EQ(r.json["error"]["code"], "invalid_api_key");
    EXPECT_TRUE(r.json["error"]["message"].is_string());
    EXPECT_EQ(get(server, "/v1/models", key).status, 401);
  }
  EXPECT_EQ(post_json(server, "/v1/completions", body, "sekrit").status, 200);
  EXPECT_EQ(get(server, "/v1/models", "sekrit").status, 200);
  EXPECT_EQ(get(server, "/health").status, 200);
}

TEST(OverloadTest, QueueFullIs429AndShutdownIs503) {
  TestServer full(TestServerOptions{.max_waiting_requests = 0});
  const HttpReply r = post_json(full, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.json["error"]["type"], "rate_limit_error");

  TestServer stopping;
  stopping.engine().shutdown();
  const HttpReply s = post_json(stopping, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  ASSERT_EQ(s.status, 503) << s.body;
  EXPECT_TRUE(s.json["error"]["code"].is_null()) << s.body;
}

}  // namespace
}  // namespace drift::e2e
