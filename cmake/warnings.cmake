# drift_warnings: the warning set every Drift target compiles with.
add_library(drift_warnings INTERFACE)
target_compile_options(drift_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers>)
