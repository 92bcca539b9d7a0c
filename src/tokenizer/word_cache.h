// Remembers the ids of recently merged pre-tokens. Text repeats its words and merging is the slow part of
// encoding, so most pieces are answered from here. Safe to share between threads.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/string_map.h"

namespace drift::tokenizer {

class WordCache {
 public:
  explicit WordCache(size_t capacity) : capacity_(capacity) {}

  // Appends the cached ids of `word` to `ids`; false when `word` is not cached.
  bool lookup(std::string_view word, std::vector<int32_t>& ids) const;
  // When full, the cache starts over rather than tracking recency: cheap, and it keeps following the text.
  void insert(std::string_view word, std::span<const int32_t> ids);

 private:
  mutable std::mutex mutex_;
  StringMap<std::vector<int32_t>> entries_;
  size_t capacity_;
};

}  // namespace drift::tokenizer
