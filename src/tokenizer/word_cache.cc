#include "tokenizer/word_cache.h"

namespace drift::tokenizer {

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& ids) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(word);
  if (it == entries_.end()) return false;
  ids.insert(ids.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, std::span<const int32_t> ids) {
  std::lock_guard lock(mutex_);
  if (entries_.size() >= capacity_) entries_.clear();
  entries_.try_emplace(std::string(word), ids.begin(), ids.end());
}

}  // namespace drift::tokenizer
