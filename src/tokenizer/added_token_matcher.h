// Cuts added tokens out of text the way Hugging Face does: leftmost-longest matches, scanned left to
// right without overlap, honouring each token's single_word, lstrip and rstrip.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"

namespace drift::tokenizer {

// One stretch of text after added tokens are cut out: plain text, or one added token (its text then
// includes any whitespace that lstrip/rstrip took with it).
struct Segment {
  std::string_view text;
  int32_t token_id = -1;  // -1: plain text
  bool is_token() const { return token_id >= 0; }
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Each token is matched by its `content`.
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // Appends the segments of `text` (valid UTF-8) in order; plain-text segments are never empty.
  void split(std::string_view text, std::vector<Segment>& segments) const;

 private:
  struct Match {
    size_t begin;
    size_t end;
    const AddedToken* token;
  };
  // A byte trie over the token contents; `token` is the index of the token ending at a node, or -1.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t token = -1;
  };

  int32_t child(int32_t node, uint8_t byte) const;
  // The longest token starting at `pos`, if any.
  const AddedToken* longest_at(std::string_view text, size_t pos, size_t& end) const;
  bool find_from(std::string_view text, size_t from, Match& match) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> starts_token_{};
};

}  // namespace drift::tokenizer
