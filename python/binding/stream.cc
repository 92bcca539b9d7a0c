#include "stream.h"

#include "errors.h"

namespace drift::python {

namespace {

constexpr std::chrono::milliseconds kWaitSlice{50};

}  // namespace

std::vector<Event> wait_for_events(Engine& engine, OutputQueue& queue, const std::vector<std::string>& request_ids) {
  // Signals are checked before waiting, not after: an interrupt never drops events already taken.
  for (;;) {
    if (PyErr_CheckSignals() != 0) {
      for (const std::string& id : request_ids) engine.cancel(id);
      throw py::error_already_set();
    }
    std::vector<Event> events;
    {
      py::gil_scoped_release nogil;
      events = queue.wait_pop(kWaitSlice);
    }
    if (!events.empty()) return events;
  }
}

RequestStream::RequestStream(std::shared_ptr<Engine> engine, std::shared_ptr<OutputQueue> queue,
                             std::string request_id, std::optional<std::string> prompt, bool with_logprobs)
    : engine_(std::move(engine)),
      queue_(std::move(queue)),
      request_id_(std::move(request_id)),
      prompt_(std::move(prompt)),
      with_logprobs_(with_logprobs) {}

RequestStream::~RequestStream() { cancel(); }

void RequestStream::cancel() {
  if (!finished_) engine_->cancel(request_id_);
}

RequestOutput RequestStream::next() {
  if (finished_) throw py::stop_iteration();
  while (pending_.empty())
    for (Event& e : wait_for_events(*engine_, *queue_, {request_id_})) pending_.push_back(std::move(e.second));
  Gathered delta;
  delta.add(pending_.front());
  pending_.pop_front();
  finished_ = delta.done;
  if (delta.failed()) throw DriftException(delta.last.error);
  return to_request_output(delta, prompt_, with_logprobs_);
}

void bind_stream(py::module_& m) {
  py::class_<RequestStream>(m, "RequestStream",
                            "Iterates over one request's outputs as the engine produces them: each item holds "
                            "only the new text and token ids; the last one has finished=True. Leaving the loop "
                            "early, cancel() or dropping the stream cancels the request.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &RequestStream::next)
      .def("cancel", &RequestStream::cancel, "Cancels the request; the stream then ends with finish_reason 'cancelled'.")
      .def_property_readonly("request_id", &RequestStream::request_id)
      .def_property_readonly("finished", &RequestStream::finished);
}

}  // namespace drift::python
