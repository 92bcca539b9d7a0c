#include "base/check.h"

namespace drift::detail {

void check_failed(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace drift::detail
