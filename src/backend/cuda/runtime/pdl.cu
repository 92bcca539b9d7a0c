#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/runtime/pdl.h"

namespace drift::backend::cuda {

namespace {

std::atomic<bool>& pdl_flag() {
  static std::atomic<bool> flag = [] {
    const char* env = std::getenv("DRIFT_PDL");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return flag;
}

}  // namespace

bool pdl_enabled() { return pdl_flag().load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { pdl_flag().store(on, std::memory_order_relaxed); }

}  // namespace drift::backend::cuda
