// tiktoken rank files: every token's raw bytes with its rank, which is also its id. Two spellings are
// read: OpenAI's `.tiktoken` ("<base64 bytes> <rank>" per line) and the JSON data files of the npm package
// `tiktoken` (encoders/*.json), whose "bpe_ranks" string holds lines of "<label> <first rank> <base64>...",
// consecutive tokens taking consecutive ranks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"
#include "tokenizer/string_map.h"

namespace drift::tokenizer {

struct TiktokenRanks {
  std::vector<std::string> by_rank;  // the bytes of the token with rank r; empty where no token has rank r
  StringMap<int32_t> rank_of;        // token bytes -> rank
};

// Errors name `source` and the line; a rank or token given twice is an error.
Expected<TiktokenRanks> parse_tiktoken_ranks(std::string_view contents, std::string_view source);
Expected<TiktokenRanks> read_tiktoken_ranks(const std::string& path);

}  // namespace drift::tokenizer
