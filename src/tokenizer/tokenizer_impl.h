// The tables behind a Tokenizer (internal to src/tokenizer): the pipeline stages in the order encode()
// runs them, and what decode() needs per id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_token_matcher.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/string_map.h"
#include "tokenizer/tokenizer.h"

namespace drift::tokenizer {

struct TokenEntry {
  std::string text;   // stored vocab string or added-token content
  std::string bytes;  // what decode() emits for it; empty for an id no token has
  bool special = false;
};

struct TokenizerImpl {
  AddedTokenMatcher input_matcher;  // added tokens matched as written (normalized=false)
  Normalizer normalizer;
  AddedTokenMatcher normalized_matcher;  // added tokens matched in normalized text (normalized=true)
  PreTokenizer pre_tokenizer;
  BpeModel model;
  PostProcessor post_processor;
  std::vector<TokenEntry> tokens;  // by id
  StringMap<int32_t> added_ids;    // added-token content -> id

  // Normalizes plain text (no added tokens from the input pass in it) and appends its ids.
  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const;
  // Pre-tokenizes normalized text without added tokens in it and appends the BPE ids of each piece.
  void encode_pieces(std::string_view text, std::vector<int32_t>& ids) const;
};

}  // namespace drift::tokenizer
