# The CUDA backend is optional and builds whenever nvcc exists (CI compiles it without a GPU).
# CMake 3.25 does not know C++20 for nvcc 13, so CMAKE_CUDA_STANDARD emits no flag: pass -std=c++20 by hand.
if(DRIFT_CUDA STREQUAL "AUTO")
  if(EXISTS /usr/local/cuda/bin/nvcc AND NOT CMAKE_CUDA_COMPILER)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  set(DRIFT_CUDA_ENABLED ${CMAKE_CUDA_COMPILER})
else()
  set(DRIFT_CUDA_ENABLED ${DRIFT_CUDA})
endif()
if(DRIFT_CUDA_ENABLED)
  # H100/H200; sm_90a also admits wgmma and setmaxnreg.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90a)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CUDA_STANDARD falls back to CXX_STANDARD (20, required), which CMake 3.25 cannot map for nvcc 13 and
  # rejects at generation: not requiring it leaves the explicit -std=c++20.
  function(drift_cuda_target target)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr -lineinfo>)
    set_target_properties(${target} PROPERTIES CUDA_STANDARD_REQUIRED OFF)
  endfunction()
  message(STATUS "drift: CUDA backend on (${CMAKE_CUDA_COMPILER}, arch ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "drift: CUDA backend off (no nvcc)")
endif()
