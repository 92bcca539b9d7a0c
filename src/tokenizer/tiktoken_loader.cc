// Tokenizer::from_tiktoken: the same pipeline as a tokenizer.json BPE (special tokens cut out, regex split,
// byte-level merges), with the merge table derived from tiktoken's ranks instead of read from a list.
#include <fmt/format.h>

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_field.h"
#include "tokenizer/regex.h"
#include "tokenizer/tiktoken_ranks.h"
#include "tokenizer/tokenizer_impl.h"

namespace drift::tokenizer {
namespace {

// tiktoken merges the adjacent pair whose joined bytes form the lowest-ranked token, leftmost on ties,
// whatever the two halves are. So every split of a token into two tokens is a merge, ranked by the token
// it makes: the HF merge loop over this table makes the same choices tiktoken's loop does.
std::vector<BpeModel::RankedMerge> merges_from_ranks(const TiktokenRanks& ranks) {
  std::vector<BpeModel::RankedMerge> merges;
  for (size_t rank = 0; rank < ranks.by_rank.size(); ++rank) {
    const std::string_view token = ranks.by_rank[rank];
    for (size_t cut = 1; cut < token.size(); ++cut) {
      const auto left = ranks.rank_of.find(token.substr(0, cut));
      if (left == ranks.rank_of.end()) continue;
      const auto right = ranks.rank_of.find(token.substr(cut));
      if (right == ranks.rank_of.end()) continue;
      merges.push_back({left->second, right->second, int32_t(rank), int32_t(rank)});
    }
  }
  return merges;
}

// A text starts as single bytes, so a byte no token spells would be lost; tiktoken files spell all 256.
Status check_single_bytes(const TiktokenRanks& ranks, std::string_view source) {
  for (int b = 0; b < 256; ++b) {
    if (!ranks.rank_of.contains(std::string(1, char(b)))) {
      return invalid_argument(fmt::format("{}: no token for the single byte 0x{:02X}", source, b));
    }
  }
  return Status::Ok();
}

Expected<std::vector<TokenEntry>> build_token_table(const TiktokenRanks& ranks,
                                                    std::span<const SpecialToken> special_tokens,
                                                    std::string_view source) {
  int32_t max_id = int32_t(ranks.by_rank.size()) - 1;
  for (const SpecialToken& s : special_tokens) {
    if (s.id < 0) return invalid_argument(fmt::format("{}: special token '{}' has id {}", source, s.content, s.id));
    max_id = std::max(max_id, s.id);
  }
  if (size_t(max_id) >= 2 * (ranks.rank_of.size() + special_tokens.size()) + 1024) {
    return invalid_argument(fmt::format("{}: special token ids go up to {}, far past the vocabulary", source, max_id));
  }
  std::vector<TokenEntry> tokens(size_t(max_id) + 1);
  for (size_t rank = 0; rank < ranks.by_rank.size(); ++rank) {
    const std::string& bytes = ranks.by_rank[rank];
    if (bytes.empty()) continue;
    append_visible(bytes, tokens[rank].text);
    tokens[rank].bytes = bytes;
  }
  for (const SpecialToken& s : special_tokens) {
    TokenEntry& e = tokens[size_t(s.id)];
    if (s.content.empty()) return invalid_argument(fmt::format("{}: special token {} is empty", source, s.id));
    if (!e.bytes.empty()) {
      return invalid_argument(fmt::format("{}: special token '{}' has id {}, which is taken by '{}'", source,
                                          s.content, s.id, e.text));
    }
    e = {s.content, s.content, /*special=*/true};
  }
  return tokens;
}

// The pre-tokenizer as a tokenizer.json would spell it: split with `pattern`, then bytes, no prefix space.
Expected<PreTokenizer> make_pre_tokenizer(std::string_view pattern, std::string_view source) {
  if (Expected<Regex> regex = Regex::compile(pattern); !regex.ok()) {
    return invalid_argument(fmt::format("{}: tiktoken pattern: {}", source, regex.status().message()));
  }
  const Json root = {
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", std::string(pattern)}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}}};
  return PreTokenizer::from_json(JsonField(root, source));
}

}  // namespace

Expected<Tokenizer> Tokenizer::from_tiktoken(const std::string& ranks_path, std::string_view pattern,
                                             std::span<const SpecialToken> special_tokens) {
  DRIFT_ASSIGN_OR_RETURN(const TiktokenRanks ranks, read_tiktoken_ranks(ranks_path));
  DRIFT_RETURN_IF_ERROR(check_single_bytes(ranks, ranks_path));
  DRIFT_ASSIGN_OR_RETURN(std::vector<TokenEntry> tokens, build_token_table(ranks, special_tokens, ranks_path));
  DRIFT_ASSIGN_OR_RETURN(PreTokenizer pre_tokenizer, make_pre_tokenizer(pattern, ranks_path));

  StringMap<int32_t> vocab;
  vocab.reserve(ranks.rank_of.size());
  for (const auto& [bytes, rank] : ranks.rank_of) vocab.emplace(tokens[size_t(rank)].text, rank);
  // tiktoken takes a piece that is itself a token whole before merging: ignore_merges in HF terms.
  BpeModel model = BpeModel::from_tables(std::move(vocab), merges_from_ranks(ranks), /*ignore_merges=*/true);

  std::vector<AddedToken> added;
  StringMap<int32_t> added_ids;
  for (const SpecialToken& s : special_tokens) {
    if (const auto [it, inserted] = added_ids.emplace(s.content, s.id); !inserted) {
      return invalid_argument(
          fmt::format("{}: special token '{}' has ids {} and {}", ranks_path, s.content, it->second, s.id));
    }
    added.push_back({.id = s.id, .content = s.content, .normalized = false, .special = true});
  }
  const Json no_steps = {{"normalizer", nullptr}, {"post_processor", nullptr}};
  DRIFT_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::from_json(JsonField(no_steps, ranks_path)));
  DRIFT_ASSIGN_OR_RETURN(PostProcessor post_processor, PostProcessor::from_json(JsonField(no_steps, ranks_path)));
  TokenizerImpl impl{AddedTokenMatcher(std::move(added)),
                     std::move(normalizer),
                     AddedTokenMatcher(),
                     std::move(pre_tokenizer),
                     std::move(model),
                     std::move(post_processor),
                     std::move(tokens),
                     std::move(added_ids)};
  return Tokenizer(std::make_shared<const TokenizerImpl>(std::move(impl)));
}

}  // namespace drift::tokenizer
