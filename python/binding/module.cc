// _drift: the C++ half of the `drift` Python package (python/drift/__init__.py is the other).
#include <pybind11/pybind11.h>

#include "errors.h"
#include "llm.h"
#include "outputs.h"
#include "sampling.h"
#include "stream.h"

PYBIND11_MODULE(_drift, m) {
  namespace python = drift::python;
  m.doc() = "Drift's engine, wrapped for Python: use the `drift` package.";
  python::bind_errors(m);
  python::bind_outputs(m);
  python::bind_sampling_params(m);
  python::bind_stream(m);
  python::bind_engine(m);
}
