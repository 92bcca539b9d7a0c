#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace drift::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  pending_ += text;
  Result r;
  // The earliest match wins, so text after it is never sent.
  size_t best = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at != std::string::npos && at < best) {
      best = at;
      r.stop_string = stop;
    }
  }
  if (best != std::string::npos) {
    r.stopped = true;
    r.emit = pending_.substr(0, best);
    pending_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  r.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopMatcher::flush() { return std::exchange(pending_, {}); }

}  // namespace drift::engine
