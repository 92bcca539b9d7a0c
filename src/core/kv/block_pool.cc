#include "core/kv/block_pool.h"

#include <fmt/format.h>

#include "base/check.h"

namespace drift::core {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size),
      refcount_(num_blocks, 0),
      prev_(num_blocks, kNoBlock),
      next_(num_blocks, kNoBlock) {
  DRIFT_CHECK_GE(num_blocks, 0);
  DRIFT_CHECK_GT(block_size, 0);
  for (int32_t b = 0; b < num_blocks; ++b) push_back(b);
}

int32_t BlockPool::allocate() {
  DRIFT_CHECK_GT(num_free_, 0);
  int32_t block = head_;
  unlink(block);
  refcount_[block] = 1;
  return block;
}

void BlockPool::incref(int32_t block) {
  DRIFT_CHECK(block >= 0 && block < num_blocks(), "block {}", block);
  int32_t& rc = refcount_[block];
  if (rc == 0) unlink(block);
  ++rc;
}

void BlockPool::free(int32_t block, bool keep) {
  DRIFT_CHECK(block >= 0 && block < num_blocks(), "block {}", block);
  int32_t& rc = refcount_[block];
  DRIFT_CHECK_GT(rc, 0);
  if (--rc > 0) return;
  if (keep) {
    push_back(block);
  } else {
    push_front(block);
  }
}

std::vector<int32_t> BlockPool::free_list() const {
  std::vector<int32_t> out;
  out.reserve(num_free_);
  for (int32_t b = head_; b != kNoBlock && out.size() <= refcount_.size(); b = next_[b]) {
    out.push_back(b);
  }
  return out;
}

Status BlockPool::check_invariants() const {
  int32_t num_zero = 0;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    int32_t rc = refcount_[b];
    if (rc < 0) return internal_error(fmt::format("block {} has refcount {}", b, rc));
    if (rc == 0) ++num_zero;
  }
  if (num_zero != num_free_) {
    return internal_error(fmt::format("{} blocks have refcount 0 but num_free is {}", num_zero, num_free_));
  }
  int32_t count = 0;
  int32_t prev = kNoBlock;
  for (int32_t b = head_; b != kNoBlock; b = next_[b]) {
    if (++count > num_free_) return internal_error("free list is longer than num_free (a cycle?)");
    if (refcount_[b] != 0) {
      return internal_error(fmt::format("block {} is on the free list with refcount {}", b, refcount_[b]));
    }
    if (prev_[b] != prev) return internal_error(fmt::format("block {} has a bad prev link", b));
    prev = b;
  }
  if (count != num_free_) return internal_error(fmt::format("free list has {} blocks, num_free is {}", count, num_free_));
  if (tail_ != prev) return internal_error("free list tail is not its last block");
  return Status::Ok();
}

void BlockPool::push_front(int32_t block) {
  prev_[block] = kNoBlock;
  next_[block] = head_;
  if (head_ != kNoBlock) prev_[head_] = block;
  head_ = block;
  if (tail_ == kNoBlock) tail_ = block;
  ++num_free_;
}

void BlockPool::push_back(int32_t block) {
  next_[block] = kNoBlock;
  prev_[block] = tail_;
  if (tail_ != kNoBlock) next_[tail_] = block;
  tail_ = block;
  if (head_ == kNoBlock) head_ = block;
  ++num_free_;
}

void BlockPool::unlink(int32_t block) {
  int32_t p = prev_[block];
  int32_t n = next_[block];
  if (p != kNoBlock) {
    next_[p] = n;
  } else {
    head_ = n;
  }
  if (n != kNoBlock) {
    prev_[n] = p;
  } else {
    tail_ = p;
  }
  prev_[block] = kNoBlock;
  next_[block] = kNoBlock;
  --num_free_;
}

}  // namespace drift::core
