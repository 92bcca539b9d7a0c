// What generate() and stream() hand back, in vLLM's shapes: a RequestOutput holding one CompletionOutput,
// with its fields also readable on the RequestOutput itself (out.text, out.token_ids, ...).
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "drift/request.h"

namespace drift::python {

namespace py = pybind11;

// One request's outputs gathered on the C++ side, without the GIL: a whole request for generate(), one
// engine event for a stream's delta.
struct Gathered {
  std::string request_id;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  Output last;  // the final event once `done`: finish reason, usage, timings, the prompt's tokens
  bool done = false;

  void add(const Output& out);
  bool failed() const { return done && last.finish_reason == FinishReason::kError; }
};

struct CompletionOutput {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  py::object logprobs;  // None, or per token {token_id: logprob}: the chosen token first, then the most likely
  std::optional<std::string> finish_reason;  // None until the request ends
  std::optional<std::string> stop_reason;    // the stop string or token that ended it
};

struct RequestOutput {
  std::string request_id;
  std::optional<std::string> prompt;  // None when the prompt was given as token ids
  std::vector<int32_t> prompt_token_ids;  // known once finished
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  std::optional<Usage> usage;
  std::optional<Timings> timings;
};

// Needs the GIL (it builds the logprob dicts).
RequestOutput to_request_output(const Gathered& g, const std::optional<std::string>& prompt, bool with_logprobs);

void bind_outputs(py::module_& m);

}  // namespace drift::python
