#include "outputs.h"

#include <pybind11/stl.h>

namespace drift::python {

namespace {

py::list logprob_dicts(const std::vector<TokenLogprobs>& logprobs) {
  py::list out;
  for (const TokenLogprobs& lp : logprobs) {
    py::dict d;
    d[py::int_(lp.token)] = lp.logprob;
    for (const auto& [token, logprob] : lp.top)
      if (!d.contains(py::int_(token))) d[py::int_(token)] = logprob;
    out.append(std::move(d));
  }
  return out;
}

const CompletionOutput& first(const RequestOutput& r) { return r.outputs.at(0); }

std::string repr(const RequestOutput& r) {
  const CompletionOutput& c = first(r);
  return py::str("RequestOutput(request_id={!r}, prompt={!r}, text={!r}, token_ids={}, finish_reason={!r})")
      .format(r.request_id, r.prompt, c.text, c.token_ids, c.finish_reason);
}

void bind_usage(py::module_& m) {
  py::class_<Usage>(m, "Usage", "Tokens a finished request used.")
      .def_readonly("prompt_tokens", &Usage::prompt_tokens)
      .def_readonly("completion_tokens", &Usage::completion_tokens)
      .def_readonly("cached_tokens", &Usage::cached_tokens, "prompt tokens served from the prefix cache")
      .def("__repr__", [](const Usage& u) {
        return py::str("Usage(prompt_tokens={}, completion_tokens={}, cached_tokens={})")
            .format(u.prompt_tokens, u.completion_tokens, u.cached_tokens);
      });
  py::class_<Timings>(m, "Timings", "Seconds from submission: to first scheduled, to first token, to the end.")
      .def_readonly("queued_s", &Timings::queued_s)
      .def_readonly("time_to_first_token_s", &Timings::time_to_first_token_s)
      .def_readonly("e2e_s", &Timings::e2e_s)
      .def("__repr__", [](const Timings& t) {
        return py::str("Timings(queued_s={:.4f}, time_to_first_token_s={:.4f}, e2e_s={:.4f})")
            .format(t.queued_s, t.time_to_first_token_s, t.e2e_s);
      });
}

}  // namespace

void Gathered::add(const Output& out) {
  request_id = out.request_id;
  tokens.insert(tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
  text += out.text;
  logprobs.insert(logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  if (out.finished) {
    last = out;
    done = true;
  }
}

RequestOutput to_request_output(const Gathered& g, const std::optional<std::string>& prompt, bool with_logprobs) {
  CompletionOutput c;
  c.text = g.text;
  c.token_ids = g.tokens;
  c.logprobs = with_logprobs ? py::object(logprob_dicts(g.logprobs)) : py::object(py::none());
  RequestOutput r;
  r.request_id = g.request_id;
  r.prompt = prompt;
  r.finished = g.done;
  if (g.done) {
    c.finish_reason = finish_reason_name(g.last.finish_reason);
    if (!g.last.stop_reason.empty()) c.stop_reason = g.last.stop_reason;
    r.prompt_token_ids = g.last.prompt_tokens;
    r.usage = g.last.usage;
    r.timings = g.last.timings;
  }
  r.outputs.push_back(std::move(c));
  return r;
}

void bind_outputs(py::module_& m) {
  bind_usage(m);
  py::class_<CompletionOutput>(m, "CompletionOutput", "One generated continuation (vLLM's CompletionOutput).")
      .def_readonly("index", &CompletionOutput::index)
      .def_readonly("text", &CompletionOutput::text)
      .def_readonly("token_ids", &CompletionOutput::token_ids)
      .def_readonly("logprobs", &CompletionOutput::logprobs)
      .def_readonly("finish_reason", &CompletionOutput::finish_reason)
      .def_readonly("stop_reason", &CompletionOutput::stop_reason);
  py::class_<RequestOutput>(m, "RequestOutput",
                            "A request's result (generate) or its newest piece (stream). text, token_ids, "
                            "logprobs, finish_reason and stop_reason are those of outputs[0].")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt", &RequestOutput::prompt)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("outputs", &RequestOutput::outputs)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("usage", &RequestOutput::usage)
      .def_readonly("timings", &RequestOutput::timings)
      .def_property_readonly("text", [](const RequestOutput& r) { return first(r).text; })
      .def_property_readonly("token_ids", [](const RequestOutput& r) { return first(r).token_ids; })
      .def_property_readonly("logprobs", [](const RequestOutput& r) { return first(r).logprobs; })
      .def_property_readonly("finish_reason", [](const RequestOutput& r) { return first(r).finish_reason; })
      .def_property_readonly("stop_reason", [](const RequestOutput& r) { return first(r).stop_reason; })
      .def("__repr__", &repr);
}

}  // namespace drift::python
