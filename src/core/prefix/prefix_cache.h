// PrefixCache: an index from chained block hashes to blocks whose KV is already written (contract 4).
// A block is indexed only after the step that computed it (publish), a hit is used only after its tokens,
// its parent entry and its namespace compare equal, and the cache holds no references: an indexed block
// whose refcount drops to 0 stays on the pool's free list, at the LRU end, until it is handed out again;
// at that point on_block_reused() drops its entry. That is the eviction, in LRU order among refcount-0 blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/prefix/hash_index.h"
#include "core/request/sequence.h"
#include "drift/status.h"

namespace drift::core {

struct PrefixCacheMetrics {
  int64_t queries = 0;           // admissions that looked up their tokens
  int64_t query_tokens = 0;      // tokens those admissions asked for
  int64_t hit_tokens = 0;        // tokens served from the cache
  int64_t evictions = 0;         // entries dropped because one of their blocks was handed out again
  int64_t published_blocks = 0;  // entries created
  int64_t collisions = 0;        // publishes refused: the hash was taken by other tokens
};

enum class PrefixMissReason : uint8_t {
  kFullHit,        // every full block is cached (a trailing partial block never is)
  kNoEntry,        // no entry under the block's hash (never published, or evicted long ago)
  kEvicted,        // the block's hash was indexed, and its entry was evicted recently
  kTokenMismatch,  // an entry has the hash but other tokens: a hash collision
  kParentMismatch, // an entry has the hash and tokens, but follows a different prefix
  kWindowEvicted,  // the full-attention blocks are cached but a sliding group lost blocks of its window
};

struct PrefixExplanation {
  int32_t num_full_blocks = 0;  // full blocks in the tokens
  int32_t num_hit_blocks = 0;   // usable cached prefix, in blocks
  PrefixMissReason reason = PrefixMissReason::kFullHit;
  int32_t block_index = -1;     // the first block that missed; -1 on a full hit
  std::string to_string() const;
};

const char* prefix_miss_reason_name(PrefixMissReason reason);

class PrefixCache {
 public:
  // num_blocks: [num_groups] blocks of each layer group's pool. sliding_windows: [num_groups] window of
  // each group, 0 = full attention. hash_mask: every hash is ANDed with it; tests pass a narrow mask to
  // force collisions.
  PrefixCache(int32_t block_size, std::vector<int32_t> num_blocks, std::vector<int32_t> sliding_windows,
              uint64_t hash_mask = ~uint64_t{0});

  int32_t block_size() const { return block_size_; }
  int32_t num_groups() const { return static_cast<int32_t>(windows_.size()); }
  int32_t num_entries() const { return static_cast<int32_t>(index_.size()); }
  const PrefixCacheMetrics& metrics() const { return metrics_; }

  // The id of a namespace string, created on first use.
  int32_t intern_namespace(std::string_view name);
  // Appends to seq.block_hashes the hash of every full block of seq.tokens not hashed yet.
  void hash_blocks(Sequence& seq) const;

  // The longest usable cached prefix of `seq`, at most `max_blocks` blocks. Writes the matching entries,
  // one per block, to *entries and returns their count. Needs seq.block_hashes (hash_blocks).
  int32_t match(const Sequence& seq, int32_t max_blocks, std::vector<int32_t>* entries) const;
  uint64_t entry_id(int32_t entry) const { return entries_[entry].id; }
  // The block of `group` held by `entry`; kNoBlock where a sliding group's block was evicted.
  int32_t entry_block(int32_t entry, int32_t group) const { return blocks_[entry * num_groups() + group]; }

  // Indexes each full block of `seq` whose KV is written (below seq.num_computed), that holds no draft
  // token, and that it has not seen yet. Call it after the step that computed them.
  void publish(Sequence& seq);

  // Whether `block` of `group` is indexed: when it is freed it should be kept (pool tail), not reused first.
  bool is_cached(int32_t group, int32_t block) const { return block_entry_[group][block] >= 0; }
  // The pool handed `block` out again, so its content is about to be overwritten.
  void on_block_reused(int32_t group, int32_t block);

  void record_query(int32_t num_tokens, int32_t num_hit_tokens);
  // Why `tokens` under `cache_namespace` would (not) hit, block by block.
  PrefixExplanation explain(std::span<const int32_t> tokens, std::string_view cache_namespace) const;
  Status check_invariants() const;

 private:
  struct Entry {
    uint64_t id = 0;         // unique, never reused; 0 = free slot
    uint64_t hash = 0;
    uint64_t parent_id = 0;  // 0 for a first block
    int32_t namespace_id = 0;
  };

  uint64_t root_hash(int32_t namespace_id) const;
  // The slot holding entry `id` under `hash`, or -1 when it is gone.
  int32_t find_live(uint64_t hash, uint64_t id) const;
  bool tokens_equal(int32_t entry, std::span<const int32_t> tokens) const;
  // Whether `entry` can follow `parent_id` (0: a first block in `namespace_id`) with these tokens.
  bool entry_matches(int32_t entry, uint64_t parent_id, int32_t namespace_id, std::span<const int32_t> tokens) const;
  // Every sliding group holds the blocks of entries[first_block_in_window(k * block_size), k).
  bool window_present(std::span<const int32_t> entries, int32_t k) const;
  void remove_entry(int32_t entry, bool evicted);

  int32_t block_size_;
  uint64_t hash_mask_;
  std::vector<int32_t> windows_;                 // [num_groups]
  std::vector<Entry> entries_;                   // [slots]
  std::vector<int32_t> tokens_;                  // [slots * block_size]
  std::vector<int32_t> blocks_;                  // [slots * num_groups]
  std::vector<int32_t> free_slots_;
  HashIndex index_;                              // hash -> slot
  std::vector<std::vector<int32_t>> block_entry_;  // [num_groups][group's num_blocks] slot indexing the block, or -1
  std::unordered_map<std::string, int32_t> namespaces_;
  uint64_t next_id_ = 1;
  // Hashes of evicted entries, direct-mapped by hash (a later eviction may overwrite an older one), so
  // explain() can tell "evicted recently" from "never seen" at one store per eviction.
  std::vector<uint64_t> evicted_hashes_;  // [power of two]
  std::vector<uint8_t> evicted_valid_;    // [same]
  bool recently_evicted(uint64_t hash) const;
  PrefixCacheMetrics metrics_;
};

}  // namespace drift::core
