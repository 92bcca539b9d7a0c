// _drift.Engine: one drift::Engine and its model's chat template, behind drift.LLM. It may be used from
// several Python threads at once: the engine takes submissions from any thread, and each call waits only
// on its own requests, with the GIL released.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "drift/engine.h"
#include "sampling.h"
#include "server/chat_template.h"
#include "stream.h"

namespace drift::python {

namespace py = pybind11;

// Text the engine tokenizes, or token ids used as given.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

class PyEngine {
 public:
  // Loads the model with the GIL released; DriftError with the engine's message when it cannot.
  PyEngine(const std::string& model, const std::string& device, const py::kwargs& kwargs);
  ~PyEngine();

  // Submits every prompt, waits for all, returns them in order. DriftError when one is refused or fails.
  py::list generate(const std::vector<Prompt>& prompts, const SamplingOptions& params, bool add_special_tokens);
  std::unique_ptr<RequestStream> stream(const Prompt& prompt, const SamplingOptions& params, bool add_special_tokens);
  // The prompt the model's chat template makes of `messages_json` (a JSON list of {role, content}).
  // `tools_json` "null" means none.
  std::string render_chat(const std::string& messages_json, const std::string& tools_json, bool add_generation_prompt,
                          const std::string& template_kwargs_json) const;
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;
  py::dict metrics() const;
  int32_t max_model_len() const { return engine_->max_model_len(); }
  std::string model_name() const { return engine_->model_name(); }
  void shutdown();

 private:
  // `request` without its prompt; runs without the GIL.
  Expected<std::string> submit(const Prompt& prompt, Request request, OutputCallback on_output);

  std::shared_ptr<Engine> engine_;
  Expected<server::ChatTemplate> chat_template_;  // or why the model has none
};

void bind_engine(py::module_& m);

}  // namespace drift::python
