// How a Drift Status reaches Python: drift.DriftError, a RuntimeError whose message is the engine's and
// whose `code` names the StatusCode ("not_found", "invalid_argument", ...).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <utility>

#include "drift/status.h"

namespace drift::python {

namespace py = pybind11;

// Thrown anywhere in the binding, with or without the GIL; translated to DriftError at the boundary.
class DriftException : public std::exception {
 public:
  explicit DriftException(Status status) : status_(std::move(status)) {}
  const char* what() const noexcept override { return status_.message().c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

void bind_errors(py::module_& m);

}  // namespace drift::python
