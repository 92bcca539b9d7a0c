// HashIndex: open-addressing map from a 64-bit block hash to a non-negative slot number. The prefix cache
// looks one up per published block and per prefix-hit block, so it avoids the node allocation and the
// prime-modulo division of std::unordered_map: keys are already well mixed, the table is a power of two
// with linear probing, and erase shifts entries back instead of leaving tombstones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace drift::core {

class HashIndex {
 public:
  // Room for `expected` keys before the first growth.
  explicit HashIndex(size_t expected = 16);

  size_t size() const { return size_; }
  // The value stored under `key`, or -1.
  int32_t find(uint64_t key) const;
  // Stores key -> value (value >= 0). The key must be absent.
  void insert(uint64_t key, int32_t value);
  // Removes `key` if present.
  void erase(uint64_t key);

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t value = -1;  // -1: empty
  };
  size_t home(uint64_t key) const { return size_t(key) & mask_; }
  void grow();

  std::vector<Slot> slots_;  // [capacity], a power of two, at most half full
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace drift::core
