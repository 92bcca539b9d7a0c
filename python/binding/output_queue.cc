#include "output_queue.h"

namespace drift::python {

void OutputQueue::push(size_t index, const Output& out) {
  {
    std::lock_guard lock(mu_);
    events_.emplace_back(index, out);
  }
  cv_.notify_all();
}

std::vector<Event> OutputQueue::wait_pop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<Event> events;
  events.swap(events_);
  return events;
}

OutputCallback queue_callback(std::shared_ptr<OutputQueue> queue, size_t index) {
  return [queue = std::move(queue), index](const Output& out) { queue->push(index, out); };
}

}  // namespace drift::python
