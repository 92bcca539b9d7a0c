#include "core/prefix/prefix_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"
#include "core/kv/block_pool.h"
#include "core/kv/kv_spec.h"
#include "core/prefix/block_hash.h"

namespace drift::core {

const char* prefix_miss_reason_name(PrefixMissReason reason) {
  switch (reason) {
    case PrefixMissReason::kFullHit: return "full_hit";
    case PrefixMissReason::kNoEntry: return "no_entry";
    case PrefixMissReason::kEvicted: return "evicted";
    case PrefixMissReason::kTokenMismatch: return "token_mismatch";
    case PrefixMissReason::kParentMismatch: return "parent_mismatch";
    case PrefixMissReason::kWindowEvicted: return "window_evicted";
  }
  return "?";
}

std::string PrefixExplanation::to_string() const {
  std::string head = fmt::format("{} of {} full blocks cached", num_hit_blocks, num_full_blocks);
  switch (reason) {
    case PrefixMissReason::kFullHit:
      return head;
    case PrefixMissReason::kNoEntry:
      return fmt::format("{}; block {}: no entry (never published in this namespace, or evicted long ago)", head, block_index);
    case PrefixMissReason::kEvicted:
      return fmt::format("{}; block {}: evicted (its blocks were reused for other requests)", head, block_index);
    case PrefixMissReason::kTokenMismatch:
      return fmt::format("{}; block {}: hash collision, the cached tokens differ", head, block_index);
    case PrefixMissReason::kParentMismatch:
      return fmt::format("{}; block {}: cached under a different prefix", head, block_index);
    case PrefixMissReason::kWindowEvicted:
      return fmt::format("{}; block {}: a sliding-window group lost blocks of the window before it", head, block_index);
  }
  return head;
}

PrefixCache::PrefixCache(int32_t block_size, std::vector<int32_t> num_blocks, std::vector<int32_t> sliding_windows,
                         uint64_t hash_mask)
    : block_size_(block_size), hash_mask_(hash_mask), windows_(std::move(sliding_windows)) {
  DRIFT_CHECK_GT(block_size, 0);
  DRIFT_CHECK(!windows_.empty(), "the prefix cache needs at least one layer group");
  DRIFT_CHECK_EQ(num_blocks.size(), windows_.size());
  for (int32_t n : num_blocks) block_entry_.emplace_back(n, -1);
  namespaces_.emplace("", 0);
  // An entry holds a block of its own in some group, so there are at most as many entries as the largest
  // pool has blocks; reserving keeps the step path free of reallocation.
  const int32_t max_entries = *std::max_element(num_blocks.begin(), num_blocks.end());
  index_ = HashIndex(size_t(max_entries));
  entries_.reserve(max_entries);
  tokens_.reserve(size_t(max_entries) * block_size);
  blocks_.reserve(size_t(max_entries) * windows_.size());
  size_t evicted_slots = 1024;
  while (evicted_slots < size_t(max_entries)) evicted_slots *= 2;
  evicted_hashes_.assign(evicted_slots, 0);
  evicted_valid_.assign(evicted_slots, 0);
}

bool PrefixCache::recently_evicted(uint64_t hash) const {
  size_t i = hash & (evicted_hashes_.size() - 1);
  return evicted_valid_[i] && evicted_hashes_[i] == hash;
}

int32_t PrefixCache::intern_namespace(std::string_view name) {
  auto [it, inserted] = namespaces_.try_emplace(std::string(name), static_cast<int32_t>(namespaces_.size()));
  return it->second;
}

uint64_t PrefixCache::root_hash(int32_t namespace_id) const {
  // Namespace ids are local to this cache, so hashing the id is as good as hashing the string.
  return namespace_hash(std::string_view(reinterpret_cast<const char*>(&namespace_id), sizeof(namespace_id))) & hash_mask_;
}

void PrefixCache::hash_blocks(Sequence& seq) const {
  // A pending token's value is not known yet (overlapped scheduling): the block holding it waits.
  size_t num_full = (seq.tokens.size() - size_t(seq.num_pending_tokens)) / block_size_;
  std::span<const int32_t> tokens(seq.tokens);
  for (size_t i = seq.block_hashes.size(); i < num_full; ++i) {
    uint64_t parent = i == 0 ? root_hash(seq.cache_namespace_id) : seq.block_hashes[i - 1];
    seq.block_hashes.push_back(block_hash(parent, tokens.subspan(i * block_size_, block_size_)) & hash_mask_);
  }
}

int32_t PrefixCache::find_live(uint64_t hash, uint64_t id) const {
  int32_t slot = index_.find(hash);
  return slot >= 0 && entries_[slot].id == id ? slot : -1;
}

bool PrefixCache::tokens_equal(int32_t entry, std::span<const int32_t> tokens) const {
  return std::equal(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(entry) * block_size_);
}

bool PrefixCache::entry_matches(int32_t entry, uint64_t parent_id, int32_t namespace_id,
                                std::span<const int32_t> tokens) const {
  const Entry& e = entries_[entry];
  return e.parent_id == parent_id && e.namespace_id == namespace_id && tokens_equal(entry, tokens);
}

bool PrefixCache::window_present(std::span<const int32_t> entries, int32_t k) const {
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (windows_[g] == 0) continue;
    for (int32_t j = first_block_in_window(k * block_size_, windows_[g], block_size_); j < k; ++j) {
      if (entry_block(entries[j], g) == kNoBlock) return false;
    }
  }
  return true;
}

int32_t PrefixCache::match(const Sequence& seq, int32_t max_blocks, std::vector<int32_t>* entries) const {
  size_t first = entries->size();
  int32_t limit = std::min<int32_t>(max_blocks, static_cast<int32_t>(seq.block_hashes.size()));
  std::span<const int32_t> tokens(seq.tokens);
  uint64_t parent_id = 0;
  for (int32_t i = 0; i < limit; ++i) {
    int32_t slot = index_.find(seq.block_hashes[i]);
    if (slot < 0) break;
    if (!entry_matches(slot, parent_id, seq.cache_namespace_id, tokens.subspan(size_t(i) * block_size_, block_size_))) break;
    entries->push_back(slot);
    parent_id = entries_[slot].id;
  }
  std::span<const int32_t> found(entries->data() + first, entries->size() - first);
  auto k = static_cast<int32_t>(found.size());
  while (k > 0 && !window_present(found, k)) --k;
  entries->resize(first + k);
  return k;
}

void PrefixCache::publish(Sequence& seq) {
  // Draft tokens may be rejected and overwritten, so a block holding one is not final yet; nor is one
  // holding a pending token, or KV computed against a partial view (SpecPV), until it is computed again.
  int32_t final_tokens = std::min(seq.num_computed, seq.num_tokens() - seq.num_draft_tokens - seq.num_pending_tokens);
  if (seq.approximate_from >= 0) final_tokens = std::min(final_tokens, seq.approximate_from);
  int32_t num_full = final_tokens / block_size_;
  if (static_cast<int32_t>(seq.block_entries.size()) >= num_full) return;
  hash_blocks(seq);
  std::span<const int32_t> tokens(seq.tokens);
  const auto first = static_cast<int32_t>(seq.block_entries.size());
  for (int32_t i = first; i < num_full; ++i) {
    uint64_t parent_id = i == 0 ? 0 : seq.block_entries[i - 1];
    // Nothing is evicted during publish, so a parent indexed in this loop is still there.
    bool parent_live = i == 0 || (parent_id != 0 && (i > first || find_live(seq.block_hashes[i - 1], parent_id) >= 0));
    bool has_blocks = true;
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (windows_[g] == 0 && seq.block_tables[g][i] == kNoBlock) has_blocks = false;
    }
    if (!parent_live || !has_blocks) {
      seq.block_entries.push_back(0);  // the chain is broken here: nothing below it can be found
      continue;
    }
    uint64_t hash = seq.block_hashes[i];
    std::span<const int32_t> block_tokens = tokens.subspan(size_t(i) * block_size_, block_size_);
    if (int32_t existing = index_.find(hash); existing >= 0) {
      // Another request published the same content first (keep its entry), or different content
      // collided on the hash (keep the older one).
      bool same = entry_matches(existing, parent_id, seq.cache_namespace_id, block_tokens);
      if (!same) ++metrics_.collisions;
      seq.block_entries.push_back(same ? entries_[existing].id : 0);
      continue;
    }
    int32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = static_cast<int32_t>(entries_.size());
      entries_.emplace_back();
      tokens_.resize(tokens_.size() + block_size_);
      blocks_.resize(blocks_.size() + num_groups());
    }
    index_.insert(hash, slot);
    entries_[slot] = Entry{next_id_++, hash, parent_id, seq.cache_namespace_id};
    std::copy(block_tokens.begin(), block_tokens.end(), tokens_.begin() + ptrdiff_t(slot) * block_size_);
    for (int32_t g = 0; g < num_groups(); ++g) {
      int32_t block = seq.block_tables[g][i];
      blocks_[slot * num_groups() + g] = block;
      if (block != kNoBlock) {
        // A block indexed twice would be dropped from one entry while the other still points at it.
        DRIFT_CHECK_EQ(block_entry_[g][block], -1);
        block_entry_[g][block] = slot;
      }
    }
    ++metrics_.published_blocks;
    seq.block_entries.push_back(entries_[slot].id);
  }
}

void PrefixCache::on_block_reused(int32_t group, int32_t block) {
  int32_t slot = block_entry_[group][block];
  if (slot < 0) return;
  if (windows_[group] == 0) {
    remove_entry(slot, /*evicted=*/true);
    return;
  }
  // A sliding group's block: the entry still serves hits whose window does not reach this block.
  blocks_[slot * num_groups() + group] = kNoBlock;
  block_entry_[group][block] = -1;
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (entry_block(slot, g) != kNoBlock) return;
  }
  remove_entry(slot, /*evicted=*/true);
}

void PrefixCache::remove_entry(int32_t entry, bool evicted) {
  Entry& e = entries_[entry];
  for (int32_t g = 0; g < num_groups(); ++g) {
    int32_t& block = blocks_[entry * num_groups() + g];
    if (block != kNoBlock) block_entry_[g][block] = -1;
    block = kNoBlock;
  }
  index_.erase(e.hash);
  if (evicted) {
    ++metrics_.evictions;
    size_t i = e.hash & (evicted_hashes_.size() - 1);
    evicted_hashes_[i] = e.hash;
    evicted_valid_[i] = 1;
  }
  e = Entry{};
  free_slots_.push_back(entry);
}

void PrefixCache::record_query(int32_t num_tokens, int32_t num_hit_tokens) {
  ++metrics_.queries;
  metrics_.query_tokens += num_tokens;
  metrics_.hit_tokens += num_hit_tokens;
}

PrefixExplanation PrefixCache::explain(std::span<const int32_t> tokens, std::string_view cache_namespace) const {
  PrefixExplanation out;
  out.num_full_blocks = static_cast<int32_t>(tokens.size()) / block_size_;
  auto ns = namespaces_.find(std::string(cache_namespace));
  int32_t namespace_id = ns == namespaces_.end() ? -1 : ns->second;
  uint64_t parent_hash = root_hash(namespace_id);
  uint64_t parent_id = 0;
  std::vector<int32_t> found;
  for (int32_t i = 0; i < out.num_full_blocks; ++i) {
    std::span<const int32_t> block_tokens = tokens.subspan(size_t(i) * block_size_, block_size_);
    uint64_t hash = block_hash(parent_hash, block_tokens) & hash_mask_;
    int32_t slot = namespace_id < 0 ? -1 : index_.find(hash);
    PrefixMissReason reason = PrefixMissReason::kFullHit;
    if (slot < 0) {
      reason = namespace_id >= 0 && recently_evicted(hash) ? PrefixMissReason::kEvicted : PrefixMissReason::kNoEntry;
    } else if (!tokens_equal(slot, block_tokens)) {
      reason = PrefixMissReason::kTokenMismatch;
    } else if (!entry_matches(slot, parent_id, namespace_id, block_tokens)) {
      reason = PrefixMissReason::kParentMismatch;
    }
    if (reason != PrefixMissReason::kFullHit) {
      out.reason = reason;
      out.block_index = i;
      break;
    }
    found.push_back(slot);
    parent_hash = hash;
    parent_id = entries_[slot].id;
  }
  auto k = static_cast<int32_t>(found.size());
  while (k > 0 && !window_present(found, k)) --k;
  if (k < static_cast<int32_t>(found.size())) {
    out.reason = PrefixMissReason::kWindowEvicted;
    out.block_index = k;
  }
  out.num_hit_blocks = k;
  return out;
}

Status PrefixCache::check_invariants() const {
  size_t live = 0;
  for (int32_t slot = 0; slot < static_cast<int32_t>(entries_.size()); ++slot) {
    const Entry& e = entries_[slot];
    if (e.id == 0) continue;
    ++live;
    if (index_.find(e.hash) != slot) {
      return internal_error(fmt::format("prefix entry {} (id {}) is not indexed under its hash", slot, e.id));
    }
    bool any_block = false;
    for (int32_t g = 0; g < num_groups(); ++g) {
      int32_t block = entry_block(slot, g);
      if (block == kNoBlock) {
        if (windows_[g] == 0) return internal_error(fmt::format("prefix entry {} lost its full-attention block", slot));
        continue;
      }
      any_block = true;
      if (block_entry_[g][block] != slot) {
        return internal_error(fmt::format("group {} block {} of prefix entry {} points to entry {}", g, block, slot, block_entry_[g][block]));
      }
    }
    if (!any_block) return internal_error(fmt::format("prefix entry {} holds no block", slot));
  }
  if (live != index_.size()) return internal_error(fmt::format("{} live prefix entries, {} indexed", live, index_.size()));
  for (int32_t g = 0; g < num_groups(); ++g) {
    for (int32_t block = 0; block < static_cast<int32_t>(block_entry_[g].size()); ++block) {
      int32_t slot = block_entry_[g][block];
      if (slot >= 0 && (entries_[slot].id == 0 || entry_block(slot, g) != block)) {
        return internal_error(fmt::format("group {} block {} is tagged with a stale prefix entry {}", g, block, slot));
      }
    }
  }
  return Status::Ok();
}

}  // namespace drift::core
