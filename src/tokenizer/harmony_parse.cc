// parse_completion: walks the generated ids through header -> <|message|> -> content -> <|end|> | <|return|>
// | <|call|>, the message grammar of format.md, and reads each header's role, channel and recipient.
#include <fmt/format.h>

#include "tokenizer/harmony.h"

namespace drift::tokenizer::harmony {
namespace {

constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";

struct ControlIds {
  int32_t start, end, message, channel, constrain, return_, call;
};

Expected<ControlIds> control_ids(const Tokenizer& tokenizer) {
  ControlIds ids{};
  const std::pair<const char*, int32_t*> wanted[] = {
      {"<|start|>", &ids.start},         {"<|end|>", &ids.end},         {"<|message|>", &ids.message},
      {"<|channel|>", &ids.channel},     {"<|constrain|>", &ids.constrain}, {"<|return|>", &ids.return_},
      {"<|call|>", &ids.call}};
  for (const auto& [token, id] : wanted) {
    const std::optional<int32_t> found = tokenizer.token_to_id(token);
    if (!found) return invalid_argument(fmt::format("the tokenizer has no {} token, so it is not harmony's", token));
    *id = *found;
  }
  return ids;
}

std::vector<std::string_view> words(std::string_view text) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while ((pos = text.find_first_not_of(" \t\n", pos)) != std::string_view::npos) {
    const size_t end = text.find_first_of(" \t\n", pos);
    out.push_back(text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    pos = end;
  }
  return out;
}

// Words after the first of a header part: "to=X" names the recipient, anything else the content type.
void read_attributes(std::span<const std::string_view> attributes, ParsedMessage& m) {
  for (std::string_view w : attributes) {
    if (w.starts_with("to=")) {
      m.recipient = std::string(w.substr(3));
    } else {
      m.content_type = std::string(w);
    }
  }
}

// "<|constrain|>json" is the content type "json": the marker only separates words.
std::string without_constrain(std::string_view text) {
  std::string out;
  for (size_t at; (at = text.find(kConstrain)) != std::string_view::npos; text.remove_prefix(at + kConstrain.size())) {
    out.append(text.substr(0, at));
    out += ' ';
  }
  out.append(text);
  return out;
}

}  // namespace

ParsedMessage parse_header(std::string_view header) {
  ParsedMessage m;
  const size_t channel_at = header.find(kChannel);
  const std::string role_part = without_constrain(header.substr(0, channel_at));
  const std::string channel_part =
      channel_at == std::string_view::npos ? "" : without_constrain(header.substr(channel_at + kChannel.size()));
  const std::vector<std::string_view> role_words = words(role_part);
  if (!role_words.empty()) {
    m.role = std::string(role_words.front());
    read_attributes(std::span(role_words).subspan(1), m);
  }
  const std::vector<std::string_view> channel_words = words(channel_part);
  if (!channel_words.empty()) {
    m.channel = std::string(channel_words.front());
    read_attributes(std::span(channel_words).subspan(1), m);
  }
  return m;
}

namespace {

class CompletionParser {
 public:
  CompletionParser(const Tokenizer& tokenizer, ControlIds ids) : tokenizer_(tokenizer), ids_(ids) {}

  Status feed(size_t index, int32_t id) {
    switch (state_) {
      case State::kHeader:
        if (id == ids_.message) {
          messages_.push_back(parse_header(header_prefix_ + tokenizer_.decode(header_ids_)));
          header_ids_.clear();
          state_ = State::kContent;
          return Status::Ok();
        }
        if (tokenizer_.is_special(id) && id != ids_.channel && id != ids_.constrain) {
          return unexpected(index, id, "in a header");
        }
        header_ids_.push_back(id);
        return Status::Ok();
      case State::kContent:
        if (id == ids_.end || id == ids_.return_ || id == ids_.call) {
          finish_content(id == ids_.end       ? MessageEnd::kEnd
                         : id == ids_.return_ ? MessageEnd::kReturn
                                              : MessageEnd::kCall);
          state_ = id == ids_.end ? State::kBetween : State::kDone;
          return Status::Ok();
        }
        if (tokenizer_.is_special(id)) return unexpected(index, id, "inside a message");
        content_ids_.push_back(id);
        return Status::Ok();
      case State::kBetween:
        if (id != ids_.start) return unexpected(index, id, "where <|start|> should begin the next message");
        header_prefix_.clear();
        state_ = State::kHeader;
        return Status::Ok();
      case State::kDone:
        return unexpected(index, id, "after the stop token");
    }
    return Status::Ok();
  }

  // A message the ids stopped inside of is kept as unfinished.
  std::vector<ParsedMessage> finish() && {
    if (state_ == State::kContent) finish_content(MessageEnd::kUnfinished);
    if (state_ == State::kHeader && !header_ids_.empty()) {
      messages_.push_back(parse_header(header_prefix_ + tokenizer_.decode(header_ids_)));
    }
    return std::move(messages_);
  }

 private:
  enum class State { kHeader, kContent, kBetween, kDone };

  void finish_content(MessageEnd end) {
    messages_.back().content = tokenizer_.decode(content_ids_);
    messages_.back().end = end;
    content_ids_.clear();
  }

  Status unexpected(size_t index, int32_t id, std::string_view where) const {
    return invalid_argument(fmt::format("completion token {} ({} '{}') is unexpected {}", index, id,
                                        tokenizer_.token_text(id), where));
  }

  const Tokenizer& tokenizer_;
  ControlIds ids_;
  State state_ = State::kHeader;
  // The prompt ended with "<|start|>assistant", so the first header continues that role.
  std::string header_prefix_ = "assistant";
  std::vector<int32_t> header_ids_;
  std::vector<int32_t> content_ids_;
  std::vector<ParsedMessage> messages_;
};

}  // namespace

Expected<std::vector<ParsedMessage>> parse_completion(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  DRIFT_ASSIGN_OR_RETURN(const ControlIds control, control_ids(tokenizer));
  CompletionParser parser(tokenizer, control);
  for (size_t i = 0; i < ids.size(); ++i) DRIFT_RETURN_IF_ERROR(parser.feed(i, ids[i]));
  return std::move(parser).finish();
}

}  // namespace drift::tokenizer::harmony
