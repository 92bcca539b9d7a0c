// StopMatcher: finds stop strings in streamed text, even when a stop string spans several tokens,
// and holds back only the tail that could still become one, so the client never sees a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace drift::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;         // text safe to send now
    bool stopped = false;
    std::string stop_string;  // which one matched
  };
  // Appends newly decoded text; returns what can be emitted.
  Result push(std::string_view text);
  // The end of the stream: whatever was held back is released.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text not yet emitted
};

}  // namespace drift::engine
