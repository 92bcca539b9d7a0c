#include "bench/serve_bench.h"

#include <httplib.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "bench/sse_client.h"
#include "tokenizer/tokenizer.h"

namespace drift::bench {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// Fills in the model id and tokenizer path from GET /v1/models when the config leaves them empty.
Status resolve_model(ServeBenchConfig& c) {
  httplib::Client client(c.base_url);
  client.set_connection_timeout(std::chrono::seconds(10));
  httplib::Headers headers;
  if (!c.api_key.empty()) headers.emplace("Authorization", "Bearer " + c.api_key);
  auto res = client.Get("/v1/models", headers);
  if (!res) return io_error(fmt::format("cannot reach {}: {}", c.base_url, httplib::to_string(res.error())));
  if (res->status != 200) return io_error(fmt::format("GET {}/v1/models answered {}: {}", c.base_url, res->status, res->body));
  const Json models = Json::parse(res->body, nullptr, false);
  if (models.is_discarded() || !models.contains("data") || !models["data"].is_array() || models["data"].empty())
    return data_loss(fmt::format("GET {}/v1/models lists no model", c.base_url));
  const Json& first = models["data"][0];
  if (c.model.empty()) c.model = first.value("id", std::string());
  if (c.tokenizer_path.empty()) {
    const std::string root = first.value("root", std::string());
    if (root.empty()) return invalid_argument("the server reports no model root folder: pass --tokenizer");
    c.tokenizer_path = (std::filesystem::path(root) / "tokenizer.json").string();
  }
  return Status::Ok();
}

// Ids a random prompt may use: every id the tokenizer knows that is not a special token.
std::vector<int32_t> ordinary_token_ids(const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (!tok.is_special(id) && !tok.token_text(id).empty()) ids.push_back(id);
  return ids;
}

Json request_body(const ServeBenchConfig& c, const std::vector<int32_t>& prompt) {
  // The fields vllm bench serve sends for the openai backend.
  Json body = {{"model", c.model},
               {"prompt", prompt},
               {"max_tokens", c.output_len},
               {"temperature", 0.0},
               {"repetition_penalty", 1.0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!c.response_format.empty()) body["response_format"] = Json::parse(c.response_format);
  return body;
}

// Caps requests in flight at `limit` (0: no cap) and remembers the most seen at once.
class ConcurrencyGate {
 public:
  explicit ConcurrencyGate(int32_t limit) : limit_(limit) {}
  void enter() {
    std::unique_lock lock(mu_);
    freed_.wait(lock, [&] { return limit_ <= 0 || in_flight_ < limit_; });
    peak_ = std::max(peak_, ++in_flight_);
  }
  void leave() {
    std::lock_guard lock(mu_);
    --in_flight_;
    freed_.notify_one();
  }
  int32_t peak() const {
    std::lock_guard lock(mu_);
    return peak_;
  }

 private:
  int32_t limit_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  int32_t in_flight_ = 0, peak_ = 0;
};

}  // namespace

std::vector<double> arrival_times(int32_t num_requests, double rate, uint64_t seed) {
  std::vector<double> times(size_t(std::max(num_requests, 0)), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return times;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (double& time : times) {
    time = t;
    t += gap(rng);
  }
  return times;
}

std::vector<std::vector<int32_t>> random_token_prompts(int32_t num_prompts, int32_t len, const std::vector<int32_t>& allowed,
                                                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, allowed.size() - 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(num_prompts));
  for (auto& p : prompts) {
    p.resize(size_t(len));
    for (int32_t& id : p) id = allowed[pick(rng)];
  }
  return prompts;
}

Expected<ServeBenchReport> run_serve_bench(ServeBenchConfig c) {
  if (c.num_prompts < 1) return invalid_argument("--num-prompts must be at least 1");
  if (c.input_len < 1 || c.output_len < 1) return invalid_argument("--input-len and --output-len must be at least 1");
  DRIFT_RETURN_IF_ERROR(resolve_model(c));
  DRIFT_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(c.tokenizer_path));
  const std::vector<int32_t> allowed = ordinary_token_ids(tok);
  if (allowed.empty()) return invalid_argument(fmt::format("{} has no ordinary tokens to draw prompts from", c.tokenizer_path));

  const Endpoint endpoint{c.base_url, c.api_key};
  const std::string path = "/v1/completions";
  const auto prompts = random_token_prompts(c.num_prompts, c.input_len, allowed, c.seed);
  for (int32_t i = 0; i < c.num_warmups; ++i) {
    const RequestResult warm = send_streaming_request(endpoint, path, request_body(c, prompts[size_t(i) % prompts.size()]), c.input_len);
    if (!warm.success) return io_error("the warm-up request failed: " + warm.error);
  }

  const std::vector<double> arrivals = arrival_times(c.num_prompts, c.request_rate, c.seed);
  std::vector<RequestResult> results(prompts.size());
  ConcurrencyGate gate(c.max_concurrency);
  std::vector<std::thread> senders;
  senders.reserve(prompts.size());
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
    gate.enter();
    senders.emplace_back([&, i] {
      results[i] = send_streaming_request(endpoint, path, request_body(c, prompts[i]), c.input_len);
      gate.leave();
    });
  }
  for (std::thread& t : senders) t.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  ServeBenchReport report;
  report.summary = summarize(results, duration, gate.peak(), c.goodput);
  report.config = std::move(c);
  report.requests = std::move(results);
  return report;
}

}  // namespace drift::bench
