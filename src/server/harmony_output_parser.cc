#include "server/harmony_output_parser.h"

#include <algorithm>
#include <array>
#include <utility>

#include "tokenizer/harmony.h"

namespace drift::server {

namespace {

constexpr std::string_view kStart = "<|start|>", kMessage = "<|message|>", kFunctions = "functions.";
// The control tokens that end a message's body.
constexpr std::array<std::string_view, 3> kBodyEnds = {"<|end|>", "<|return|>", "<|call|>"};
// A header holds a role, a channel, a recipient and a content type, far less than this; longer text with
// no <|message|> is not harmony.
constexpr size_t kMaxHeaderBytes = 512;

// Where the first body end at or after `pos` starts, and its length; npos when there is none.
std::pair<size_t, size_t> find_body_end(std::string_view text, size_t pos) {
  std::pair<size_t, size_t> first{std::string_view::npos, 0};
  for (std::string_view end : kBodyEnds)
    if (const size_t at = text.find(end, pos); at < first.first) first = {at, end.size()};
  return first;
}

// How many bytes at the end of `body` may still grow into a body end ("<|", "<|ret"): they wait.
size_t undecided_tail(std::string_view body) {
  const size_t lt = body.rfind('<');
  if (lt == std::string_view::npos) return 0;
  const std::string_view tail = body.substr(lt);
  for (std::string_view end : kBodyEnds)
    if (tail.size() < end.size() && end.starts_with(tail)) return tail.size();
  return 0;
}

}  // namespace

HarmonyOutputParser::HarmonyOutputParser(bool tools, std::string_view reply_prefix)
    : tools_(tools), pending_(reply_prefix) {}

ChatDelta HarmonyOutputParser::feed(std::string_view text, bool finished) {
  pending_.append(text);
  ChatDelta out;
  size_t pos = 0;
  for (bool more = true; more && pos < pending_.size();) {
    switch (state_) {
      case State::kHeader: more = step_header(pos, finished, out); break;
      case State::kBody: more = step_body(pos, finished, out); break;
      case State::kBetween: more = step_between(pos, finished); break;
      case State::kRaw:
        emit(std::string_view(pending_).substr(pos), out);
        pos = pending_.size();
        break;
    }
  }
  pending_.erase(0, pos);
  if (finished) pending_.clear();
  return out;
}

bool HarmonyOutputParser::step_header(size_t& pos, bool finished, ChatDelta& out) {
  const std::string_view rest = std::string_view(pending_).substr(pos);
  const size_t at = rest.find(kMessage);
  if (at == std::string_view::npos) {
    if (rest.size() <= kMaxHeaderBytes && !finished) return false;
    // A header the reply stopped inside says nothing; plain or overlong text is not harmony: content.
    if (rest.size() <= kMaxHeaderBytes && rest.find("<|") != std::string_view::npos) {
      pos = pending_.size();
      return false;
    }
    state_ = State::kRaw;
    kind_ = Kind::kContent;
    message_has_text_ = false;
    return true;
  }
  open_message(rest.substr(0, at), out);
  pos += at + kMessage.size();
  state_ = State::kBody;
  return true;
}

void HarmonyOutputParser::open_message(std::string_view header, ChatDelta& out) {
  const tokenizer::harmony::ParsedMessage m = tokenizer::harmony::parse_header(role_prefix_ + std::string(header));
  role_prefix_.clear();
  message_has_text_ = false;
  if (m.recipient.starts_with(kFunctions)) {
    kind_ = tools_ ? Kind::kCall : Kind::kHidden;
    if (tools_) out.tool_calls.push_back({num_calls_++, m.recipient.substr(kFunctions.size()), ""});
    return;
  }
  kind_ = m.channel == "analysis" ? Kind::kReasoning : Kind::kContent;
}

bool HarmonyOutputParser::step_body(size_t& pos, bool finished, ChatDelta& out) {
  const std::string_view text = pending_;
  const auto [end, length] = find_body_end(text, pos);
  if (end == std::string_view::npos) {
    const size_t keep = finished ? 0 : undecided_tail(text.substr(pos));
    emit(text.substr(pos, text.size() - keep - pos), out);
    pos = text.size() - keep;
    return false;
  }
  emit(text.substr(pos, end - pos), out);
  pos = end + length;
  state_ = State::kBetween;
  return true;
}

bool HarmonyOutputParser::step_between(size_t& pos, bool finished) {
  const std::string_view rest = std::string_view(pending_).substr(pos);
  if (rest.starts_with(kStart)) {
    pos += kStart.size();
  } else if (!finished && kStart.starts_with(rest)) {
    return false;  // "<|sta": wait for the rest
  }
  // A header without <|start|> is read all the same.
  state_ = State::kHeader;
  return true;
}

void HarmonyOutputParser::emit(std::string_view text, ChatDelta& out) {
  if (text.empty() || kind_ == Kind::kHidden) return;
  if (kind_ == Kind::kCall) {
    const int32_t index = num_calls_ - 1;
    if (out.tool_calls.empty() || out.tool_calls.back().index != index) out.tool_calls.push_back({index, "", ""});
    out.tool_calls.back().arguments.append(text);
    return;
  }
  const bool reasoning = kind_ == Kind::kReasoning;
  std::string& field = reasoning ? out.reasoning : out.content;
  bool& sent = reasoning ? sent_reasoning_ : sent_content_;
  // Several messages on one side are joined by a newline, as vLLM joins them.
  if (sent && !message_has_text_) field += '\n';
  field.append(text);
  sent = true;
  message_has_text_ = true;
}

}  // namespace drift::server
