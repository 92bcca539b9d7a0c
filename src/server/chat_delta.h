// What a chat reply parses into: reasoning, content and tool calls, whole (ParsedChat) or as the pieces
// a stream sends (ChatDelta), whatever the model family's reply format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace drift::server {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's "arguments")
};

struct ParsedChat {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};

// A piece of one tool call, as OpenAI streams them: a call's first piece names the function (the client
// gets the call's id with it); later pieces only add to the arguments.
struct ToolCallDelta {
  int32_t index = 0;  // the call's position among the reply's calls
  std::string name;   // set on the call's first piece only
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;
};

// Adds a delta to the reply it is part of.
inline void accumulate(const ChatDelta& delta, ParsedChat& whole) {
  whole.reasoning += delta.reasoning;
  whole.content += delta.content;
  for (const ToolCallDelta& piece : delta.tool_calls) {
    if (size_t(piece.index) >= whole.tool_calls.size()) whole.tool_calls.resize(size_t(piece.index) + 1);
    ParsedToolCall& call = whole.tool_calls[size_t(piece.index)];
    if (!piece.name.empty()) call.name = piece.name;
    call.arguments += piece.arguments;
  }
}

}  // namespace drift::server
