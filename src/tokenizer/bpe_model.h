// The tokenizer.json "model" of type BPE over the byte-level alphabet: the vocabulary, merge ranks, and
// the merge loop that turns one pre-token into ids.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "drift/status.h"
#include "tokenizer/json_field.h"
#include "tokenizer/string_map.h"
#include "tokenizer/word_cache.h"

namespace drift::tokenizer {

class BpeModel {
 public:
  static Expected<BpeModel> from_json(const JsonField& model);

  // A merge given by the ids it joins, for vocabularies whose merges are not a list (tiktoken ranks).
  struct RankedMerge {
    int32_t left = 0;
    int32_t right = 0;
    int32_t rank = 0;  // lower merges first; equal ranks go leftmost first
    int32_t id = 0;    // the token the two become
  };
  // `vocab` maps the byte-level visible form to ids. ignore_merges: a piece that is itself a vocabulary
  // entry is taken whole.
  static BpeModel from_tables(StringMap<int32_t> vocab, std::span<const RankedMerge> merges, bool ignore_merges);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-token, given as raw bytes (the byte-level mapping happens here).
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  // Stored (byte-level visible) token string -> id.
  const StringMap<int32_t>& vocab() const { return vocab_; }
  // Whether bytes missing from the vocabulary become <0xXX> tokens.
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct MergeResult {
    int32_t rank = 0;
    int32_t id = 0;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };

  BpeModel() = default;
  Status read_vocab(const JsonField& model);
  Status read_merges(const JsonField& model);
  Status read_options(const JsonField& model);
  void prepare_byte_symbols();

  std::optional<MergeResult> find_merge(int32_t left, int32_t right) const;
  // Applies merges to `symbols` lowest rank first (leftmost on ties) until none applies.
  void merge(std::vector<Symbol>& symbols) const;
  void merge_piece(std::string_view piece, std::vector<int32_t>& ids) const;
  // Appends the id of `piece` when the whole piece is one vocabulary entry.
  bool take_whole(std::string_view piece, std::vector<int32_t>& ids) const;

  StringMap<int32_t> vocab_;
  std::unordered_map<uint64_t, MergeResult> merges_;  // key: left id << 32 | right id
  // The starting symbols for each byte value: one id, its <0xXX> fallback ids, or none (unknown byte).
  std::array<std::vector<int32_t>, 256> byte_symbols_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::unique_ptr<WordCache> cache_;
};

}  // namespace drift::tokenizer
