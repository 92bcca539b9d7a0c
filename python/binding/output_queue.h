// Where the engine thread leaves outputs for the Python thread waiting on them. Nothing here touches
// Python: the engine calls its callbacks on its own thread, without the GIL.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "drift/engine.h"

namespace drift::python {

// An output and the position of its request in the call that submitted it.
using Event = std::pair<size_t, Output>;

class OutputQueue {
 public:
  void push(size_t index, const Output& out);
  // Waits up to `timeout` for an event; returns every event queued by then, possibly none.
  std::vector<Event> wait_pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
};

// The callback for request `index`: it holds the queue, so outputs that arrive after the caller gave up
// (an interrupted generate, a dropped stream) land somewhere that still exists.
OutputCallback queue_callback(std::shared_ptr<OutputQueue> queue, size_t index);

}  // namespace drift::python
