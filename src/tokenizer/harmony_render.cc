// Renders a conversation in harmony: "<|start|>{header}<|message|>{content}<|end|>" per message
// (format.md "Message format"), the system and developer messages first, and "<|start|>assistant" last.
#include <fmt/format.h>

#include "tokenizer/harmony.h"
#include "tokenizer/harmony_tools.h"

namespace drift::tokenizer::harmony {
namespace {

const char* effort_name(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::kLow: return "low";
    case ReasoningEffort::kMedium: return "medium";
    case ReasoningEffort::kHigh: return "high";
  }
  return "medium";
}

// Sections separated by an empty line, each left out when empty (format.md "System message format").
std::string system_text(const SystemContent& system, bool has_function_tools) {
  std::vector<std::string> sections;
  std::vector<std::string> top;
  if (!system.model_identity.empty()) top.push_back(system.model_identity);
  if (!system.knowledge_cutoff.empty()) top.push_back("Knowledge cutoff: " + system.knowledge_cutoff);
  if (!system.current_date.empty()) top.push_back("Current date: " + system.current_date);
  if (!top.empty()) sections.push_back(fmt::format("{}", fmt::join(top, "\n")));
  if (system.reasoning_effort) sections.push_back(fmt::format("Reasoning: {}", effort_name(*system.reasoning_effort)));
  if (!system.valid_channels.empty()) {
    std::string channels = fmt::format("# Valid channels: {}.", fmt::join(system.valid_channels, ", "));
    if (system.channel_required) channels += " Channel must be included for every message.";
    // "If you are defining functions, it should also contain a note that all function tool calls must go
    // to the commentary channel."
    if (has_function_tools) channels += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    sections.push_back(std::move(channels));
  }
  return fmt::format("{}", fmt::join(sections, "\n\n"));
}

// "# Instructions\n\n{instructions}" then the tools (format.md "Developer message format").
Expected<std::string> developer_text(const DeveloperContent& developer) {
  std::vector<std::string> sections;
  if (!developer.instructions.empty()) sections.push_back("# Instructions\n\n" + developer.instructions);
  if (!developer.tools.empty()) {
    DRIFT_ASSIGN_OR_RETURN(std::string tools, render_tools_section(developer.tools));
    sections.push_back(std::move(tools));
  }
  return fmt::format("{}", fmt::join(sections, "\n\n"));
}

// A tool's answer names its author and then the recipient ("functions.x to=assistant", format.md "Handling
// tool calls"); an assistant's call puts the recipient after the channel, as the model writes it
// ("<|channel|>commentary to=functions.x <|constrain|>json", format.md "Receiving tool calls").
Expected<std::string> header(const Message& m, size_t index) {
  std::string out;
  switch (m.role) {
    case Role::kUser: out = "user"; break;
    case Role::kAssistant: out = "assistant"; break;
    case Role::kDeveloper: out = "developer"; break;
    case Role::kTool:
      if (m.name.empty()) {
        return invalid_argument(
            fmt::format("messages[{}]: a tool message needs the tool's name (e.g. functions.get_weather)", index));
      }
      out = m.name;
      break;
  }
  const std::string recipient = m.recipient.empty() ? "" : " to=" + m.recipient;
  const bool recipient_first = m.role == Role::kTool || m.channel.empty();
  if (recipient_first) out += recipient;
  if (!m.channel.empty()) out += "<|channel|>" + m.channel;
  if (!recipient_first) out += recipient;
  if (!m.content_type.empty()) out += " <|constrain|>" + m.content_type;
  return out;
}

// Which messages to leave out: analysis that a later final-channel answer concluded.
std::vector<bool> finished_analysis(const std::vector<Message>& messages) {
  std::vector<bool> drop(messages.size(), false);
  bool final_follows = false;
  for (size_t i = messages.size(); i-- > 0;) {
    const Message& m = messages[i];
    if (m.role != Role::kAssistant) continue;
    if (m.channel == "final") final_follows = true;
    if (m.channel == "analysis" && final_follows) drop[i] = true;
  }
  return drop;
}

void append_message(std::string_view header, std::string_view content, std::string_view end, std::string& out) {
  out += "<|start|>";
  out += header;
  out += "<|message|>";
  out += content;
  out += end;
}

}  // namespace

Expected<std::string> render(const Conversation& conversation, const RenderOptions& options) {
  std::string out;
  const bool has_function_tools = conversation.developer && !conversation.developer->tools.empty();
  if (conversation.system) {
    append_message("system", system_text(*conversation.system, has_function_tools), "<|end|>", out);
  }
  if (conversation.developer) {
    DRIFT_ASSIGN_OR_RETURN(const std::string text, developer_text(*conversation.developer));
    if (!text.empty()) append_message("developer", text, "<|end|>", out);
  }
  const std::vector<Message>& messages = conversation.messages;
  const std::vector<bool> drop =
      options.drop_finished_analysis ? finished_analysis(messages) : std::vector<bool>(messages.size(), false);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (drop[i]) continue;
    const Message& m = messages[i];
    DRIFT_ASSIGN_OR_RETURN(const std::string h, header(m, i));
    // An assistant message to a recipient is a tool call, which ends in <|call|>. A final answer is stored
    // with <|end|>, not the <|return|> it was sampled with (format.md, "Implementation note").
    const bool is_call = m.role == Role::kAssistant && !m.recipient.empty();
    append_message(h, m.content, is_call ? "<|call|>" : "<|end|>", out);
  }
  return out;
}

std::string tool_call_opening(std::string_view function) {
  // A tool call's header cannot fail: it has a role and needs no name.
  const std::string h = *header(Message::tool_call(function, ""), 0);
  return h.substr(std::string_view("assistant").size()) + "<|message|>";
}

Expected<std::string> render_for_completion(const Conversation& conversation, const RenderOptions& options) {
  DRIFT_ASSIGN_OR_RETURN(std::string out, render(conversation, options));
  return out + "<|start|>assistant";
}

}  // namespace drift::tokenizer::harmony
