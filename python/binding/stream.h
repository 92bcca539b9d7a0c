// drift.RequestStream: one request's outputs as a Python iterator, each item the newest piece (delta) of
// text and tokens. Dropping the stream before the end (a `break`, garbage collection) cancels the
// request, so its KV blocks go back at the engine's next step.
#pragma once

#include <pybind11/pybind11.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "output_queue.h"
#include "outputs.h"

namespace drift::python {

namespace py = pybind11;

class RequestStream {
 public:
  RequestStream(std::shared_ptr<Engine> engine, std::shared_ptr<OutputQueue> queue, std::string request_id,
                std::optional<std::string> prompt, bool with_logprobs);
  ~RequestStream();
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  // The next delta; StopIteration after the final one, DriftError when the request failed.
  RequestOutput next();
  void cancel();
  const std::string& request_id() const { return request_id_; }
  bool finished() const { return finished_; }

 private:
  std::shared_ptr<Engine> engine_;  // shared: a stream may outlive its LLM object
  std::shared_ptr<OutputQueue> queue_;
  std::string request_id_;
  std::optional<std::string> prompt_;
  bool with_logprobs_;
  std::deque<Output> pending_;
  bool finished_ = false;  // the final event was handed out
};

// Waits for this call's requests' next events with the GIL released, in short slices: between them the
// GIL is taken back to run signal handlers, and a KeyboardInterrupt cancels `request_ids` and propagates.
std::vector<Event> wait_for_events(Engine& engine, OutputQueue& queue, const std::vector<std::string>& request_ids);

void bind_stream(py::module_& m);

}  // namespace drift::python
