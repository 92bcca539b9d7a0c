# The Python binding (python/) builds when Debian's python3-dev and pybind11-dev are installed. It is
# compiled for Debian's interpreter, the `python3` of a fresh machine, whatever else PATH holds (pyenv,
# conda): an extension module only loads into the Python whose headers it was built with.
set(DRIFT_PYTHON_ENABLED OFF)
if(DRIFT_PYTHON)
  if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "the interpreter the Python binding is built for")
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module)
  if(Python3_FOUND)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(Python3_FOUND AND pybind11_FOUND)
    set(DRIFT_PYTHON_ENABLED ON)
    # The static libraries end up inside the module, a shared object.
    set(CMAKE_POSITION_INDEPENDENT_CODE ON)
    message(STATUS "drift: Python binding on (${Python3_EXECUTABLE} ${Python3_VERSION}, pybind11 ${pybind11_VERSION})")
  else()
    message(STATUS "drift: Python binding off (install python3-dev and pybind11-dev)")
  endif()
endif()
