#include "server/access_log.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace drift::server {

namespace {

const char* finish_name(const Output& f) {
  switch (f.finish_reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    // An unavailable error is SLO admission refusing the request: named apart so overload is easy to count.
    case FinishReason::kError: return f.error.code() == StatusCode::kUnavailable ? "shed" : "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

std::shared_ptr<spdlog::logger> access_logger() {
  // Shares the default logger's sinks and formatter, so --log-format applies to access lines too.
  static std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("access")) return existing;
    auto created = spdlog::default_logger()->clone("access");
    spdlog::register_logger(created);
    return created;
  }();
  return logger;
}

}  // namespace

void add_output(AccessRecord& r, const Output& f) {
  // Each prompt counts once although its n choices each report it.
  r.prompt_tokens = std::max<int64_t>(r.prompt_tokens, f.usage.prompt_tokens);
  r.cached_tokens = std::max<int64_t>(r.cached_tokens, f.usage.cached_tokens);
  r.completion_tokens += f.usage.completion_tokens;
  if (f.usage.completion_tokens > 0 && (r.ttft_s < 0 || f.timings.time_to_first_token_s < r.ttft_s))
    r.ttft_s = f.timings.time_to_first_token_s;
  const std::string reason = finish_name(f);
  if (("," + r.finish_reason + ",").find("," + reason + ",") == std::string::npos)
    r.finish_reason += (r.finish_reason.empty() ? "" : ",") + reason;
}

void add_outputs(AccessRecord& r, const std::vector<Output>& finals) {
  for (const Output& f : finals) add_output(r, f);
}

std::string access_text(const AccessRecord& r) {
  std::string line = fmt::format("{} \"{} {}\" {} {} prompt_tokens={} completion_tokens={} cached_tokens={}",
                                 r.id.empty() ? "-" : r.id, r.method, r.path, r.status, r.stream ? "stream" : "full",
                                 r.prompt_tokens, r.completion_tokens, r.cached_tokens);
  line += r.ttft_s >= 0 ? fmt::format(" ttft={:.3f}s", r.ttft_s) : " ttft=-";
  line += fmt::format(" total={:.3f}s finish={}", r.total_s, r.finish_reason.empty() ? "-" : r.finish_reason);
  if (!r.error.empty()) line += fmt::format(" error=\"{}\"", r.error);
  return line;
}

std::string access_json(const AccessRecord& r) {
  nlohmann::ordered_json j;
  j["id"] = r.id.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.id);
  j["method"] = r.method;
  j["path"] = r.path;
  j["status"] = r.status;
  j["stream"] = r.stream;
  j["prompt_tokens"] = r.prompt_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["ttft_s"] = r.ttft_s >= 0 ? nlohmann::ordered_json(r.ttft_s) : nlohmann::ordered_json(nullptr);
  j["total_s"] = r.total_s;
  j["finish_reason"] = r.finish_reason.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.finish_reason);
  if (!r.error.empty()) j["error"] = r.error;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void log_access(const AccessRecord& record, LogFormat format) {
  access_logger()->info(format == LogFormat::kJson ? access_json(record) : access_text(record));
}

}  // namespace drift::server
