# Included after project() on the GPU machine only (CMAKE_PROJECT_INCLUDE): that image lacks the
# libraries cpp-httplib needs, and the CUDA checks never build the server, so an empty stand-in for its
# imported target lets the project configure there.
if(NOT TARGET PkgConfig::HTTPLIB)
  add_library(PkgConfig::HTTPLIB INTERFACE IMPORTED)
endif()
