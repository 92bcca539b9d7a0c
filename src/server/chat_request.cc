#include "server/chat_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "server/common_fields.h"
#include "server/forced_tool_call.h"

namespace drift::server {

namespace {

constexpr int32_t kMaxTopLogprobs = 20;
// OpenAI's roles ("function" is its deprecated name for "tool").
const std::string kRoles[] = {"system", "developer", "user", "assistant", "tool", "function"};

ApiResult<Json> normalize_content(const Json& content, size_t index) {
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array())
    return bad_request(fmt::format("messages[{}].content must be a string or an array of parts, got {}", index,
                                   json_type_name(content)),
                       "messages");
  // vLLM joins text parts with newlines for templates that expect a string.
  std::string text;
  for (const Json& part : content) {
    const bool is_text = part.is_object() && part.value("type", std::string()) == "text" && part.contains("text") &&
                         part["text"].is_string();
    if (!is_text) {
      const std::string type = part.is_object() ? part.value("type", std::string("?")) : json_type_name(part);
      return bad_request(fmt::format("messages[{}].content holds a part of type '{}': only text parts are supported", index, type),
                         "messages");
    }
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return Json(text);
}

// OpenAI clients send a call's arguments as a JSON string; chat templates (Qwen's, Llama's) expect the
// object, as transformers' apply_chat_template receives it (vLLM converts the same way).
Status arguments_as_objects(Json& message) {
  auto calls = message.find("tool_calls");
  if (calls == message.end() || !calls->is_array()) return Status::Ok();
  for (Json& call : *calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    Json& args = call["function"]["arguments"];
    if (!args.is_string()) continue;
    Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
    if (parsed.is_discarded()) return invalid_argument("a tool call's 'arguments' is not valid JSON");
    args = std::move(parsed);
  }
  return Status::Ok();
}

}  // namespace

ApiResult<Json> normalize_messages(const Json& messages) {
  if (!messages.is_array()) return bad_request(fmt::format("'messages' must be an array, got {}", json_type_name(messages)), "messages");
  if (messages.empty()) return bad_request("'messages' must hold at least one message", "messages");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) return bad_request(fmt::format("messages[{}] must be an object, got {}", i, json_type_name(m)), "messages");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return bad_request(fmt::format("messages[{}].role must be a string", i), "messages");
    if (std::find(std::begin(kRoles), std::end(kRoles), role->get<std::string>()) == std::end(kRoles))
      return bad_request(fmt::format("messages[{}].role '{}' is not one of system, developer, user, assistant, tool",
                                     i, role->get<std::string>()),
                         "messages");
    Json message = m;
    if (Status s = arguments_as_objects(message); !s.ok()) return bad_request(fmt::format("messages[{}]: {}", i, s.message()), "messages");
    if (auto content = m.find("content"); content != m.end()) {
      auto normalized = normalize_content(*content, i);
      if (!normalized.ok()) return normalized.error();
      message["content"] = std::move(*normalized);
    } else if (role->get<std::string>() != "assistant") {
      return bad_request(fmt::format("messages[{}] has no content", i), "messages");
    }
    out.push_back(std::move(message));
  }
  return out;
}

ApiResult<GenerationPlan> parse_chat_request(const Json& body, const ServedModel& served,
                                             const Expected<ChatTemplate>& chat_template, std::string plan_id) {
  if (!body.is_object()) return bad_request(fmt::format("the request body must be a JSON object, got {}", json_type_name(body)));
  if (auto e = check_model(body, served)) return *e;
  GenerationPlan plan;
  plan.api = Api::kChat;
  plan.id = std::move(plan_id);
  plan.model = served.name;
  auto messages_it = body.find("messages");
  if (messages_it == body.end() || messages_it->is_null()) return bad_request("'messages' is required", "messages");
  auto messages = normalize_messages(*messages_it);
  if (!messages.ok()) return messages.error();

  Request base;
  base.max_tokens = served.max_model_len;  // without a limit a chat reply may fill the context
  FieldReader f(body);
  read_common_fields(f, served, base, plan);
  f.read_int("max_completion_tokens", base.max_tokens, 1, std::numeric_limits<int32_t>::max());
  const Json* clamp = f.get("clamp_max_tokens");
  if (f.get("max_completion_tokens") && !(clamp && *clamp == true)) base.max_tokens_must_fit = true;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  f.read_bool("logprobs", logprobs);
  f.read_int("top_logprobs", top_logprobs, 0, kMaxTopLogprobs);
  if (f.get("top_logprobs") && !logprobs) f.fail(bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs"));
  bool add_generation_prompt = true;
  f.read_bool("add_generation_prompt", add_generation_prompt);
  if (const Json* v = f.get("continue_final_message"); v && *v != false)
    f.fail(bad_request("'continue_final_message' is not supported", "continue_final_message"));
  const Json* tools = f.get("tools");
  if (tools && !tools->is_array()) f.fail(bad_request(fmt::format("'tools' must be an array, got {}", json_type_name(*tools)), "tools"));
  if (tools && tools->is_array())
    for (size_t i = 0; i < tools->size(); ++i)
      if (const Json& t = (*tools)[i]; !(t.is_object() && t.value("type", std::string()) == "function" &&
                                         t.contains("function") && t["function"].is_object() &&
                                         t["function"].contains("name") && t["function"]["name"].is_string()))
        f.fail(bad_request(fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i), "tools"));
  auto forced = forced_tools(f.get("tool_choice"), tools);
  if (!forced.ok()) f.fail(forced.error());
  const Json* kwargs = f.get("chat_template_kwargs");
  if (kwargs && !kwargs->is_object())
    f.fail(bad_request(fmt::format("'chat_template_kwargs' must be an object, got {}", json_type_name(*kwargs)), "chat_template_kwargs"));
  if (f.error()) return *f.error();
  if (logprobs) {
    base.sampling.top_logprobs = top_logprobs;
    plan.logprobs = true;
  }
  if (Status s = base.sampling.validate(); !s.ok()) return bad_request(s.message());

  if (!chat_template.ok()) return bad_request(chat_template.status().message(), "messages");
  const bool no_tools = !tools || (tools->is_array() && tools->empty()) || (f.get("tool_choice") && *f.get("tool_choice") == "none");
  auto rendered = chat_template->render(*messages, no_tools ? Json() : *tools, add_generation_prompt,
                                        kwargs ? *kwargs : Json::object());
  if (!rendered.ok()) return bad_request(fmt::format("the chat template failed: {}", rendered.status().message()), "messages");
  if (rendered->empty()) return bad_request("the chat template rendered an empty prompt", "messages");
  plan.output_format = detect_output_format(chat_template->source(), *rendered, !no_tools);
  const ChatOutputFormat& format = plan.output_format;
  plan.parse_output = format.tools != ToolFormat::kNone || format.think_tags || format.harmony;
  if (!no_tools && format.tools == ToolFormat::kNone)
    return bad_request("'tools' were given, but this model's chat template uses no tool-call format Drift parses "
                       "(Hermes <tool_call>, Llama 3 <|python_tag|> JSON, harmony)",
                       "tools");
  if (forced.ok() && *forced)
    if (auto e = force_tool_call(format.tools, **forced, base)) return *e;
  // The engine tokenizes it, as it does a completion's text; the template wrote the special tokens.
  Request prompt;
  prompt.prompt = std::move(*rendered);
  prompt.add_special_tokens = false;
  expand_choices(base, {std::move(prompt)}, plan);
  return plan;
}

}  // namespace drift::server
