#include "server/harmony_prompt.h"

#include <fmt/format.h>

#include <map>
#include <vector>

namespace drift::server {

namespace harmony = tokenizer::harmony;

namespace {

std::string string_or_empty(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// normalize_messages() turned each call's arguments into an object for templates; harmony writes text.
std::string arguments_text(const Json& function) {
  const auto it = function.find("arguments");
  if (it == function.end() || it->is_null()) return "{}";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::vector<harmony::Tool> harmony_tools(const Json& tools) {
  std::vector<harmony::Tool> out;
  if (!tools.is_array()) return out;
  for (const Json& tool : tools) {
    const Json& f = tool["function"];
    const auto parameters = f.find("parameters");
    const bool has_parameters = parameters != f.end() && parameters->is_object();
    out.push_back({string_or_empty(f, "name"), string_or_empty(f, "description"), has_parameters ? parameters->dump() : ""});
  }
  return out;
}

// Each earlier call's id -> its function's name: a tool message names the call it answers by id only.
std::map<std::string, std::string> call_names(const Json& messages) {
  std::map<std::string, std::string> names;
  for (const Json& m : messages) {
    const auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (const Json& call : *calls)
      if (call.is_object() && call.contains("function") && call["function"].is_object())
        names[string_or_empty(call, "id")] = string_or_empty(call["function"], "name");
  }
  return names;
}

bool is_instruction(const Json& message) {
  const std::string role = message["role"];
  return role == "system" || role == "developer";
}

// Reasoning (analysis), then either the answer (final) or a preamble (commentary) and the calls.
ApiResult<bool> add_assistant(const Json& m, size_t index, std::vector<harmony::Message>& out) {
  // "reasoning_content" is what Drift answers with; "reasoning" is vLLM's newer name for it.
  std::string reasoning = string_or_empty(m, "reasoning_content");
  if (reasoning.empty()) reasoning = string_or_empty(m, "reasoning");
  if (!reasoning.empty()) out.push_back(harmony::Message::assistant("analysis", std::move(reasoning)));
  std::string content = string_or_empty(m, "content");
  const auto calls = m.find("tool_calls");
  if (calls == m.end() || !calls->is_array() || calls->empty()) {
    if (!content.empty()) out.push_back(harmony::Message::assistant("final", std::move(content)));
    return true;
  }
  if (!content.empty()) out.push_back(harmony::Message::assistant("commentary", std::move(content)));
  for (size_t j = 0; j < calls->size(); ++j) {
    const Json& call = (*calls)[j];
    const bool named = call.is_object() && call.contains("function") && call["function"].is_object() &&
                       !string_or_empty(call["function"], "name").empty();
    if (!named)
      return bad_request(fmt::format("messages[{}].tool_calls[{}] must be {{\"function\": {{\"name\": ..., "
                                     "\"arguments\": ...}}}}", index, j), "messages");
    const Json& f = call["function"];
    out.push_back(harmony::Message::tool_call(string_or_empty(f, "name"), arguments_text(f)));
  }
  return true;
}

// The function a tool message answers: the call its tool_call_id names, else its own "name".
ApiResult<std::string> tool_name(const Json& m, size_t index, const std::map<std::string, std::string>& names) {
  if (const auto it = names.find(string_or_empty(m, "tool_call_id")); it != names.end() && !it->second.empty())
    return it->second;
  if (std::string name = string_or_empty(m, "name"); !name.empty()) return name;
  return bad_request(fmt::format("messages[{}]: a tool message needs a 'tool_call_id' that an earlier assistant "
                                 "tool call has (or a 'name'): harmony writes who answered",
                                 index),
                     "messages");
}

}  // namespace

std::optional<harmony::ReasoningEffort> parse_reasoning_effort(const std::string& name) {
  if (name == "low") return harmony::ReasoningEffort::kLow;
  if (name == "medium") return harmony::ReasoningEffort::kMedium;
  if (name == "high") return harmony::ReasoningEffort::kHigh;
  return std::nullopt;
}

ApiResult<harmony::Conversation> harmony_conversation(const Json& messages, const Json& tools,
                                                     const HarmonyPromptOptions& options) {
  harmony::Conversation c;
  if (options.reasoning_effort) c.system->reasoning_effort = options.reasoning_effort;
  c.system->current_date = options.current_date;
  harmony::DeveloperContent developer{.tools = harmony_tools(tools)};
  size_t i = 0;
  for (; i < messages.size() && is_instruction(messages[i]); ++i) {
    if (!developer.instructions.empty()) developer.instructions += "\n\n";
    developer.instructions += string_or_empty(messages[i], "content");
  }
  const std::map<std::string, std::string> names = call_names(messages);
  for (; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string role = m["role"];
    if (role == "user") {
      c.messages.push_back(harmony::Message::user(string_or_empty(m, "content")));
    } else if (is_instruction(m)) {
      c.messages.push_back({.role = harmony::Role::kDeveloper, .content = "# Instructions\n\n" + string_or_empty(m, "content")});
    } else if (role == "assistant") {
      if (auto added = add_assistant(m, i, c.messages); !added.ok()) return added.error();
    } else {  // "tool", or "function", its deprecated name
      auto name = tool_name(m, i, names);
      if (!name.ok()) return name.error();
      c.messages.push_back(harmony::Message::tool_result(*name, string_or_empty(m, "content")));
    }
  }
  if (!developer.instructions.empty() || !developer.tools.empty()) c.developer = std::move(developer);
  return c;
}

ApiResult<std::string> render_harmony_prompt(const Json& messages, const Json& tools, const HarmonyPromptOptions& options) {
  auto conversation = harmony_conversation(messages, tools, options);
  if (!conversation.ok()) return conversation.error();
  Expected<std::string> text = options.add_generation_prompt ? harmony::render_for_completion(*conversation)
                                                             : harmony::render(*conversation);
  if (!text.ok()) return bad_request(fmt::format("the harmony prompt failed: {}", text.status().message()), "messages");
  return std::move(*text);
}

}  // namespace drift::server
