#include "core/prefix/hash_index.h"

#include "base/check.h"

namespace drift::core {

HashIndex::HashIndex(size_t expected) {
  size_t capacity = 16;
  while (capacity < 2 * expected) capacity *= 2;
  slots_.resize(capacity);
  mask_ = capacity - 1;
}

int32_t HashIndex::find(uint64_t key) const {
  for (size_t i = home(key);; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.value < 0) return -1;
    if (s.key == key) return s.value;
  }
}

void HashIndex::insert(uint64_t key, int32_t value) {
  DRIFT_CHECK_GE(value, 0);
  if (2 * (size_ + 1) > slots_.size()) grow();
  size_t i = home(key);
  while (slots_[i].value >= 0) {
    DRIFT_CHECK_NE(slots_[i].key, key);
    i = (i + 1) & mask_;
  }
  slots_[i] = Slot{key, value};
  ++size_;
}

void HashIndex::erase(uint64_t key) {
  size_t i = home(key);
  while (true) {
    if (slots_[i].value < 0) return;
    if (slots_[i].key == key) break;
    i = (i + 1) & mask_;
  }
  // Backward shift: move later entries of the probe run into the hole when their home allows it, so
  // that every key stays reachable from its home without crossing an empty slot.
  size_t hole = i;
  for (size_t j = (hole + 1) & mask_; slots_[j].value >= 0; j = (j + 1) & mask_) {
    size_t h = home(slots_[j].key);
    bool home_in_between = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (!home_in_between) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole] = Slot{};
  --size_;
}

void HashIndex::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.value >= 0) insert(s.key, s.value);
  }
}

}  // namespace drift::core
