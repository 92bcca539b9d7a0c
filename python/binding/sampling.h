// drift.SamplingParams: vLLM's names for everything a drift::Request carries besides its prompt.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "drift/request.h"

namespace drift::python {

namespace py = pybind11;

struct SamplingOptions {
  SamplingParams sampling;
  int32_t max_tokens = 16;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool exact_verification = false;  // Request::exact_verification

  // Raises ValueError with the engine's message, naming the field and the value.
  void validate() const;
  bool wants_logprobs() const { return sampling.top_logprobs >= 0; }
  // A request without its prompt.
  Request to_request() const;
};

void bind_sampling_params(py::module_& m);

}  // namespace drift::python
