// AccessLogCapture: what the server's "access" logger writes while it lives. The logger exists once a call
// with the access log on has ended, so make one such call first.
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace drift::e2e {

class AccessLogCapture {
 public:
  AccessLogCapture() : logger_(spdlog::get("access")), ring_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16)) {
    ring_->set_pattern("%v");
    if (logger_) logger_->sinks().push_back(ring_);
  }
  ~AccessLogCapture() {
    if (logger_) logger_->sinks().pop_back();
  }
  AccessLogCapture(const AccessLogCapture&) = delete;
  AccessLogCapture& operator=(const AccessLogCapture&) = delete;

  bool attached() const { return logger_ != nullptr; }
  // The lines so far, once there are `n` of them or a few seconds have passed. A stream's line is written
  // when httplib releases it, just after the client saw [DONE]: wait for it before the next call, so the
  // lines come in call order.
  std::vector<std::string> wait_for_lines(size_t n) const {
    std::vector<std::string> lines = ring_->last_formatted();
    for (int i = 0; i < 500 && lines.size() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      lines = ring_->last_formatted();
    }
    return lines;
  }

 private:
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring_;
};

}  // namespace drift::e2e
