// BlockPool: ids of fixed-size KV blocks with refcounts and an ordered free list. The pool knows ids
// only; what a block holds is the layers' business (contract 3). One pool per layer group.
#pragma once

#include <cstdint>
#include <vector>

#include "drift/status.h"

namespace drift::core {

inline constexpr int32_t kNoBlock = -1;
inline constexpr int32_t kDefaultBlockSize = 16;

// Every block is either in use (refcount > 0) or on the free list (refcount 0). allocate() takes the head
// of the list. free() puts a block whose content is worth keeping (a published prefix block) at the tail
// and any other block at the head, so plain blocks are reused first and kept blocks are reused in the
// order they were released: least recently used first. That order is the prefix cache's eviction order.
class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks, int32_t block_size = kDefaultBlockSize);

  int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t block_size() const { return block_size_; }  // tokens per block
  int32_t num_free() const { return num_free_; }       // includes kept blocks that still hold content
  int32_t num_used() const { return num_blocks() - num_free_; }
  int32_t refcount(int32_t block) const { return refcount_[block]; }

  // Takes the head of the free list with refcount 1. The caller checks num_free() > 0 first.
  int32_t allocate();
  // Adds a reference. A refcount-0 block (kept content on the free list) is taken off the list.
  void incref(int32_t block);
  // Drops a reference; at zero the block returns to the free list, at the tail when `keep`, else at the head.
  void free(int32_t block, bool keep = false);

  // The free list from head (allocated next) to tail. For tests and debugging; O(num_free).
  std::vector<int32_t> free_list() const;
  // Refcounts are non-negative, the free list is a well-linked list of exactly the refcount-0 blocks.
  Status check_invariants() const;

 private:
  void push_front(int32_t block);
  void push_back(int32_t block);
  void unlink(int32_t block);

  int32_t block_size_;
  int32_t num_free_ = 0;
  int32_t head_ = kNoBlock;
  int32_t tail_ = kNoBlock;
  std::vector<int32_t> refcount_;  // [num_blocks]
  std::vector<int32_t> prev_;      // [num_blocks] free-list links; kNoBlock at the ends and off the list
  std::vector<int32_t> next_;      // [num_blocks]
};

}  // namespace drift::core
