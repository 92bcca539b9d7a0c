#include <algorithm>

#include "drift/engine.h"

namespace drift {

void Histogram::observe(double v) {
  const size_t bucket = size_t(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  ++counts[bucket];
  sum += v;
  ++count;
}

}  // namespace drift
