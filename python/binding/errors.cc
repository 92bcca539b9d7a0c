#include "errors.h"

namespace drift::python {

namespace {

// Owned by the module (an attribute of it), which outlives every call that can raise it.
PyObject* g_drift_error = nullptr;

}  // namespace

void bind_errors(py::module_& m) {
  g_drift_error = PyErr_NewExceptionWithDoc(
      "drift.DriftError",
      "The engine refused or failed: the message is the engine's, `code` its kind (\"not_found\", ...).",
      PyExc_RuntimeError, nullptr);
  m.add_object("DriftError", py::handle(g_drift_error));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const DriftException& e) {
      py::object error = py::reinterpret_borrow<py::object>(g_drift_error)(e.status().message());
      error.attr("code") = status_code_name(e.status().code());
      PyErr_SetObject(g_drift_error, error.ptr());
    }
  });
}

}  // namespace drift::python
