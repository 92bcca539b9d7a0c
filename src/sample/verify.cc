#include "sample/verify.h"

#include "base/check.h"

namespace drift::sample {

std::vector<int32_t> accept_path(const core::DraftTree& tree, std::span<const int32_t> targets) {
  DRIFT_CHECK_EQ(int64_t(targets.size()), int64_t(tree.size()) + 1);
  std::vector<int32_t> path;
  int32_t at = -1;  // the root
  for (;;) {
    const int32_t want = targets[size_t(at + 1)];
    int32_t next = -1;
    for (int32_t c = at + 1; c < tree.size() && next < 0; ++c)
      if (tree.parents[size_t(c)] == at && tree.tokens[size_t(c)] == want) next = c;
    if (next < 0) return path;
    path.push_back(next);
    at = next;
  }
}

}  // namespace drift::sample
