// drift.LLM's keyword arguments: every public EngineConfig field under its C++ name.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "drift/engine.h"

namespace drift::python {

namespace py = pybind11;

// An unknown keyword or a value of the wrong type raises TypeError naming it, a bad choice ValueError.
// `speculative` takes a dict of SpeculativeConfig's fields; admission and policy take the CLI's words.
EngineConfig engine_config_from_kwargs(const std::string& model, const std::string& device, const py::kwargs& kwargs);

}  // namespace drift::python
