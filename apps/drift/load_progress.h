// A progress line on stderr while a model loads, shown only on a terminal and only after a second.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

namespace drift::cli {

class LoadProgress {
 public:
  explicit LoadProgress(std::string what) : what_(std::move(what)), start_(std::chrono::steady_clock::now()) {}

  std::function<void(size_t, size_t)> callback() {
    return [this](size_t loaded, size_t total) { report(loaded, total); };
  }

  void finish() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  void report(size_t loaded, size_t total) {
    if (!isatty(STDERR_FILENO)) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed < 1.0) return;
    shown_ = true;
    std::fprintf(stderr, "\rloading %s: %.0f%% of %.1f MB (%.1f s)", what_.c_str(),
                 total ? 100.0 * double(loaded) / double(total) : 0.0, double(total) / 1e6, elapsed);
  }

  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<bool> shown_{false};
};

}  // namespace drift::cli
