#include "structured/mask_filler.h"

#include <algorithm>
#include <thread>

namespace drift::structured {

MaskFiller::MaskFiller(const VocabIndex& index, int32_t num_threads)
    : index_(index), pool_(num_threads), scratch_(size_t(pool_.num_threads())) {}

void MaskFiller::fill(std::span<const Row> rows) {
  pool_.parallel_for(int32_t(rows.size()), [&](int32_t i, int32_t thread) {
    const Row& row = rows[size_t(i)];
    index_.allowed(*row.matcher, row.stop_ids, row.mask, scratch_[size_t(thread)]);
  });
}

int32_t default_mask_threads() {
  return std::clamp(int32_t(std::thread::hardware_concurrency() / 2), 1, 8);
}

}  // namespace drift::structured
