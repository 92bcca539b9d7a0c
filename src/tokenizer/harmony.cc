// The o200k_harmony vocabulary, the assistant's stop tokens, and the Message shorthands.
#include "tokenizer/harmony.h"

#include <fmt/format.h>

namespace drift::tokenizer::harmony {
namespace {

// The named specials; every other id from 199998 to kVocabSize-1 is <|reserved_N|>.
constexpr struct {
  const char* content;
  int32_t id;
} kNamedSpecials[] = {
    {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|return|>", 200002},
    {"<|constrain|>", 200003},   {"<|channel|>", 200005},   {"<|start|>", 200006},
    {"<|end|>", 200007},         {"<|message|>", 200008},   {"<|call|>", 200012},
    {"<|endofprompt|>", 200018},
};
constexpr int32_t kFirstSpecialId = 199998;
constexpr int32_t kVocabSize = 201088;

}  // namespace

std::vector<SpecialToken> o200k_harmony_special_tokens() {
  std::vector<SpecialToken> tokens;
  tokens.reserve(size_t(kVocabSize - kFirstSpecialId));
  size_t next_named = 0;
  for (int32_t id = kFirstSpecialId; id < kVocabSize; ++id) {
    if (next_named < std::size(kNamedSpecials) && kNamedSpecials[next_named].id == id) {
      tokens.push_back({kNamedSpecials[next_named++].content, id});
    } else {
      tokens.push_back({fmt::format("<|reserved_{}|>", id), id});
    }
  }
  return tokens;
}

Expected<Tokenizer> load_o200k_harmony(const std::string& ranks_path) {
  const std::vector<SpecialToken> specials = o200k_harmony_special_tokens();
  return Tokenizer::from_tiktoken(ranks_path, kO200kPattern, specials);
}

std::vector<int32_t> stop_token_ids(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (std::string_view token : {"<|return|>", "<|call|>"}) {
    if (const std::optional<int32_t> id = tokenizer.token_to_id(token)) ids.push_back(*id);
  }
  return ids;
}

bool is_harmony_tokenizer(const Tokenizer& tokenizer) {
  for (std::string_view token : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"})
    if (!tokenizer.token_to_id(token)) return false;
  return stop_token_ids(tokenizer).size() == 2;
}

Message Message::user(std::string content) { return {.role = Role::kUser, .content = std::move(content)}; }

Message Message::assistant(std::string channel, std::string content) {
  return {.role = Role::kAssistant, .channel = std::move(channel), .content = std::move(content)};
}

Message Message::tool_call(std::string_view function, std::string arguments) {
  return {.role = Role::kAssistant,
          .channel = "commentary",
          .recipient = fmt::format("functions.{}", function),
          .content_type = "json",
          .content = std::move(arguments)};
}

Message Message::tool_result(std::string_view function, std::string output) {
  return {.role = Role::kTool,
          .name = fmt::format("functions.{}", function),
          .channel = "commentary",
          .recipient = "assistant",
          .content = std::move(output)};
}

}  // namespace drift::tokenizer::harmony
