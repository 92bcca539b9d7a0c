// TokenMask: which tokens of a vocabulary may come next under a JsonMatcher, as a bitset (bit t of word
// t/32). Built once per tokenizer: a byte trie of every ordinary token, so a rejected prefix rejects its
// whole subtree; and, for the common state "inside a string", the tokens that are plain string text
// (no quote, backslash or control byte) are allowed wholesale and only the rest are walked.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/json_matcher.h"
#include "tokenizer/tokenizer.h"

namespace drift::structured {

class VocabIndex {
 public:
  VocabIndex(const tokenizer::Tokenizer& tokenizer, int32_t vocab_size);
  // From the token byte strings themselves (id = index; empty: never allowed), e.g. a synthetic vocabulary.
  VocabIndex(const std::vector<std::string>& token_bytes, int32_t vocab_size);

  // allowed()'s working memory, kept between calls so a mask allocates nothing: one matcher per trie
  // depth, and the walk's stack. The index itself is never written after construction, so threads may
  // fill masks at once, each with its own Scratch (MaskFiller). A cache line of its own: the walk writes
  // the stack's size at every step, and neighbouring Scratches of other threads would share its line.
  class alignas(64) Scratch {
   private:
    friend class VocabIndex;
    struct Visit {
      uint32_t node, depth, edge;
    };
    std::vector<JsonMatcher> matchers;
    std::vector<Visit> visits;
  };

  int32_t vocab_size() const { return vocab_size_; }
  int32_t words() const { return (vocab_size_ + 31) / 32; }
  // Sets in `mask` (words() words, cleared first) the tokens that keep `matcher` valid, and the
  // `stop_ids` when the document may end there.
  void allowed(const JsonMatcher& matcher, std::span<const int32_t> stop_ids, std::span<uint32_t> mask,
               Scratch& scratch) const;

 private:
  struct Trie {
    struct Node {
      uint32_t edge_begin = 0, edge_end = 0;  // edges_[begin, end): children by byte
      uint32_t token_begin = 0, token_end = 0;  // tokens_[begin, end): ids spelled by the path
    };
    struct Edge {
      uint8_t byte;
      uint32_t child;
    };
    std::vector<Node> nodes;
    std::vector<Edge> edges;
    std::vector<int32_t> tokens;
    size_t max_depth = 0;
    void build(const std::vector<std::pair<std::string_view, int32_t>>& entries);
  };
  void walk(const Trie& trie, const JsonMatcher& start, std::span<uint32_t> mask, Scratch& scratch) const;
  void index(const std::vector<std::pair<std::string_view, int32_t>>& tokens);

  int32_t vocab_size_ = 0;
  Trie all_, special_;                   // every token; tokens that are not plain string text
  // plain_upto_[k]: the bitset of plain string-text tokens of at most k characters (the last: all of them),
  // so the in-string fast path is one copy.
  std::vector<std::vector<uint32_t>> plain_upto_;
};

}  // namespace drift::structured
