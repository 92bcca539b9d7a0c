// MaskFiller: the token masks of a step's constrained rows, filled on a fixed pool of threads while the
// GPU runs the forward. At batch 64 the worst matcher state costs milliseconds of CPU on one thread, more
// than a small model's step. Rows are independent (each its own matcher and mask, the VocabIndex read
// only, a Scratch per thread), so any split of the rows gives the serial masks bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/worker_pool.h"
#include "structured/token_mask.h"

namespace drift::structured {

class MaskFiller {
 public:
  struct Row {
    const JsonMatcher* matcher = nullptr;
    std::span<const int32_t> stop_ids;  // allowed where the document may end
    std::span<uint32_t> mask;           // [VocabIndex::words()]
  };

  // num_threads >= 1 threads fill, the caller's included (1: the caller alone, as a serial loop). `index`
  // must outlive the filler.
  MaskFiller(const VocabIndex& index, int32_t num_threads);

  int32_t num_threads() const { return pool_.num_threads(); }
  // VocabIndex::allowed() for every row; returns when all are filled.
  void fill(std::span<const Row> rows);

 private:
  const VocabIndex& index_;
  WorkerPool pool_;
  std::vector<VocabIndex::Scratch> scratch_;  // [num_threads]
};

// The default number of threads: half the hardware threads (the rest serve the HTTP side and the GPU
// launches), at most 8, at least 1.
int32_t default_mask_threads();

}  // namespace drift::structured
