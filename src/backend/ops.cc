#include "backend/ops.h"

#include <vector>

namespace drift::backend {

void Ops::copy(const Tensor& src, const Tensor& dst) {
  DRIFT_CHECK_EQ(src.nbytes(), dst.nbytes());
  std::vector<std::byte> host(src.nbytes());
  copy_to_host(host.data(), src);
  copy_from_host(dst, host.data());  // pageable memory: staged before the call returns
}

}  // namespace drift::backend
