#include "sample/verify.h"

#include "base/check.h"

namespace drift::sample {

int32_t accept_greedy(std::span<const int32_t> drafts, std::span<const int32_t> targets) {
  DRIFT_CHECK_EQ(targets.size(), drafts.size() + 1);
  int32_t accepted = 0;
  while (size_t(accepted) < drafts.size() && drafts[size_t(accepted)] == targets[size_t(accepted)]) ++accepted;
  return accepted;
}

}  // namespace drift::sample
