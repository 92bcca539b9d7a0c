#include "server/chat_output_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string_view>

namespace drift::server {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kToolCallOpen = "<tool_call>", kToolCallClose = "</tool_call>";
constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// The length of the longest suffix of `text` that is a proper prefix of `marker`: text that may still
// become the marker.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") + 1 - b);
}

bool is_blank(std::string_view s) { return trim(s).empty(); }

// {"name": ..., "arguments" | "parameters": {...}} -> a call; false when it is not one.
bool to_tool_call(const Json& j, ParsedToolCall& call) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const Json* args = j.contains("arguments") ? &j["arguments"] : j.contains("parameters") ? &j["parameters"] : nullptr;
  call.name = j["name"].get<std::string>();
  if (args == nullptr) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else {
    call.arguments = args->dump();
  }
  return true;
}

// Splits <think>...</think> off `text` into `out.reasoning`; returns the rest (the reply proper).
std::string_view split_think(const ChatOutputFormat& f, std::string_view text, bool finished, ParsedChat& out) {
  if (!f.think_tags) return text;
  bool inside = f.starts_in_reasoning;
  if (!inside) {
    const std::string_view lead = text.substr(0, text.find_first_not_of(" \t\r\n") == std::string_view::npos
                                                     ? text.size()
                                                     : text.find_first_not_of(" \t\r\n"));
    const std::string_view rest = text.substr(lead.size());
    if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
      inside = true;
      text = rest.substr(kThinkOpen.size());
    } else if (!finished && kThinkOpen.substr(0, rest.size()) == rest) {
      return {};  // "<thi": not decided yet
    }
  }
  if (!inside) return text;
  const size_t close = text.find(kThinkClose);
  if (close == std::string_view::npos) {
    out.reasoning = std::string(text.substr(0, finished ? text.size() : text.size() - partial_marker(text, kThinkClose)));
    return {};
  }
  out.reasoning = std::string(text.substr(0, close));
  std::string_view reply = text.substr(close + kThinkClose.size());
  return reply.substr(std::min(reply.size(), reply.find_first_not_of("\r\n")));
}

// Blank text after a call is the layout between calls, not content (vLLM keeps only what precedes them).
void parse_hermes(std::string_view text, bool finished, ParsedChat& out) {
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kToolCallOpen, pos);
    const bool after_call = !out.tool_calls.empty();
    if (open == std::string_view::npos) {
      std::string_view tail = text.substr(pos);
      if (!finished) tail = tail.substr(0, tail.size() - partial_marker(tail, kToolCallOpen));
      if (!(after_call && is_blank(tail))) out.content += tail;
      return;
    }
    if (!(after_call && is_blank(text.substr(pos, open - pos)))) out.content += text.substr(pos, open - pos);
    const size_t body = open + kToolCallOpen.size();
    const size_t close = text.find(kToolCallClose, body);
    if (close == std::string_view::npos) {
      if (finished) out.content += text.substr(open);  // an unclosed call is not a call
      return;
    }
    ParsedToolCall call;
    const Json j = Json::parse(text.substr(body, close - body), nullptr, false);
    if (to_tool_call(j, call)) {
      out.tool_calls.push_back(std::move(call));
    } else {
      out.content += text.substr(open, close + kToolCallClose.size() - open);
    }
    pos = close + kToolCallClose.size();
  }
}

void parse_llama3_json(std::string_view text, bool finished, ParsedChat& out) {
  std::string_view body = trim(text);
  const bool tagged = body.substr(0, kPythonTag.size()) == kPythonTag;
  if (tagged) body = trim(body.substr(kPythonTag.size()));
  const bool may_be_call = tagged || (!body.empty() && body[0] == '{') ||
                           (!finished && kPythonTag.substr(0, body.size()) == body);
  if (!may_be_call) {
    out.content = std::string(text);
    return;
  }
  if (!finished) return;  // a call is known only when the reply is complete
  std::vector<ParsedToolCall> calls;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find(';', pos);
    // A ';' inside a JSON string: extend until the piece parses.
    Json j = Json::parse(body.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos), nullptr, false);
    while (j.is_discarded() && end != std::string_view::npos) {
      end = body.find(';', end + 1);
      j = Json::parse(body.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos), nullptr, false);
    }
    ParsedToolCall call;
    if (!to_tool_call(j, call)) {
      out.content = std::string(text);
      return;
    }
    calls.push_back(std::move(call));
    pos = end == std::string_view::npos ? body.size() : end + 1;
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\n')) ++pos;
  }
  out.tool_calls = std::move(calls);
}

}  // namespace

ChatOutputFormat detect_output_format(const std::string& template_source, const std::string& rendered_prompt,
                                      bool tools_enabled) {
  ChatOutputFormat f;
  if (template_source.find("<|channel|>") != std::string::npos) {
    f.harmony = true;
    f.tools = tools_enabled ? ToolFormat::kHarmony : ToolFormat::kNone;
    return f;
  }
  if (tools_enabled && template_source.find(kToolCallOpen) != std::string::npos) f.tools = ToolFormat::kHermes;
  else if (tools_enabled && template_source.find(kPythonTag) != std::string::npos) f.tools = ToolFormat::kLlama3Json;
  f.think_tags = template_source.find(kThinkClose) != std::string::npos;
  if (f.think_tags) {
    const std::string_view tail = trim(rendered_prompt);
    f.starts_in_reasoning = tail.size() >= kThinkOpen.size() && tail.substr(tail.size() - kThinkOpen.size()) == kThinkOpen;
  }
  return f;
}

ParsedChat parse_chat_output(const ChatOutputFormat& f, const std::string& text, bool finished) {
  ParsedChat out;
  if (f.harmony) {
    accumulate(HarmonyOutputParser(f.tools != ToolFormat::kNone, f.reply_prefix).feed(text, finished), out);
    return out;
  }
  const std::string_view reply = split_think(f, text, finished, out);
  switch (f.tools) {
    case ToolFormat::kHermes: parse_hermes(reply, finished, out); break;
    case ToolFormat::kLlama3Json: parse_llama3_json(reply, finished, out); break;
    default: out.content = std::string(reply); break;
  }
  // Blank text between or around calls is layout, not an answer; hold it back until something follows.
  if (!out.tool_calls.empty() && finished && is_blank(out.content)) out.content.clear();
  if (!finished && f.tools != ToolFormat::kNone && is_blank(out.content)) out.content.clear();
  return out;
}

ChatOutputParser::ChatOutputParser(ChatOutputFormat format) : format_(std::move(format)) {
  if (format_.harmony) harmony_.emplace(format_.tools != ToolFormat::kNone, format_.reply_prefix);
}

int32_t ChatOutputParser::num_tool_calls() const {
  return harmony_ ? harmony_->num_tool_calls() : int32_t(sent_calls_);
}

ChatDelta ChatOutputParser::feed(const std::string& text, bool finished) {
  if (harmony_) return harmony_->feed(text, finished);
  text_ += text;
  const ParsedChat now = parse_chat_output(format_, text_, finished);
  ChatDelta d;
  // Fields only grow as text arrives; guard anyway, so a format quirk cannot send a negative slice.
  if (now.reasoning.size() > sent_reasoning_) d.reasoning = now.reasoning.substr(sent_reasoning_);
  if (now.content.size() > sent_content_) d.content = now.content.substr(sent_content_);
  sent_reasoning_ = std::max(sent_reasoning_, now.reasoning.size());
  sent_content_ = std::max(sent_content_, now.content.size());
  // These formats hand over each call whole: its one piece names it and carries all the arguments.
  for (size_t i = sent_calls_; i < now.tool_calls.size(); ++i)
    d.tool_calls.push_back({int32_t(i), now.tool_calls[i].name, now.tool_calls[i].arguments});
  sent_calls_ = std::max(sent_calls_, now.tool_calls.size());
  return d;
}

}  // namespace drift::server
