#include "spec/ngram_proposer.h"

#include <algorithm>

namespace drift::spec {

std::vector<int32_t> NgramProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens) const {
  const int64_t len = int64_t(tokens.size());
  if (max_tokens <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_ && n >= 1; --n) {
    const auto suffix = tokens.subspan(size_t(len - n));
    // The latest earlier occurrence whose continuation lies inside the sequence.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n, count = std::min<int64_t>(max_tokens, len - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + count);
    }
  }
  return {};
}

}  // namespace drift::spec
