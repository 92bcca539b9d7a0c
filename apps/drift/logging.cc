#include "logging.h"

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>

namespace drift::cli {

namespace {

server::LogFormat g_format = server::LogFormat::kText;

// {"time": ISO-8601 UTC, "level", "logger", "message"}; the access logger's message is already a JSON
// object (server/access_log.h) and goes in as "request".
class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    const auto since = msg.time.time_since_epoch();
    const std::time_t seconds = duration_cast<std::chrono::seconds>(since).count();
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char stamp[32];
    const size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
    const auto millis = duration_cast<milliseconds>(since).count() % 1000;
    nlohmann::ordered_json j;
    j["time"] = fmt::format("{}.{:03d}Z", std::string_view(stamp, n), millis);
    j["level"] = std::string(spdlog::level::to_string_view(msg.level).data(), spdlog::level::to_string_view(msg.level).size());
    j["logger"] = msg.logger_name.size() ? std::string(msg.logger_name.data(), msg.logger_name.size()) : "drift";
    const std::string text(msg.payload.data(), msg.payload.size());
    nlohmann::ordered_json request;
    if (j["logger"] == "access" && !(request = nlohmann::ordered_json::parse(text, nullptr, false)).is_discarded())
      j["request"] = std::move(request);
    else
      j["message"] = text;
    const std::string line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonLogFormatter>(); }
};

void set_format(server::LogFormat format) {
  g_format = format;
  if (format == server::LogFormat::kJson) {
    spdlog::set_formatter(std::make_unique<JsonLogFormatter>());
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
}

}  // namespace

void init_logging() {
  auto logger = spdlog::stderr_color_mt("drift");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::info);
  set_format(server::LogFormat::kText);
}

void add_logging_options(CLI::App& app) {
  const std::map<std::string, spdlog::level::level_enum> levels{
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug}, {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},   {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  app.add_option_function<std::string>(
         "--log-level", [levels](const std::string& level) { spdlog::set_level(levels.at(level)); },
         "Log level: trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->default_str("info")
      ->trigger_on_parse();
  app.add_option_function<std::string>(
         "--log-format", [](const std::string& f) { set_format(f == "json" ? server::LogFormat::kJson : server::LogFormat::kText); },
         "Log lines as text or as JSON objects (one per line, for log collectors)")
      ->check(CLI::IsMember({"text", "json"}))
      ->default_str("text")
      ->trigger_on_parse();
  app.fallthrough();
}

server::LogFormat log_format() { return g_format; }

}  // namespace drift::cli
