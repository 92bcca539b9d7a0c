#include "server/chat_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <limits>
#include <string_view>

#include "server/common_fields.h"
#include "server/forced_tool_call.h"
#include "server/harmony_prompt.h"

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

namespace {

// The chat fields once read: what rendering the prompt needs.
struct ChatInputs {
  Json messages;
  Json tools;         // null: none given, or tool_choice "none" (the model is not told of them)
  std::optional<Json> forced;  // the tools tool_choice forces one call among
  Json kwargs = Json::object();
  bool add_generation_prompt = true;
  std::string reasoning_effort;  // "" (not given), "low", "medium" or "high"
};

// The prompt and how the reply reads.
struct RenderedChat {
  std::string prompt;
  ChatOutputFormat format;
};

// tools: [{"type": "function", "function": {"name": ...}}], checked entry by entry.
void check_tools(FieldReader& f, const Json* tools) {
  if (!tools) return;
  if (!tools->is_array()) return f.fail(bad_request(fmt::format("'tools' must be an array, got {}", json_type_name(*tools)), "tools"));
  for (size_t i = 0; i < tools->size(); ++i)
    if (const Json& t = (*tools)[i]; !(t.is_object() && t.value("type", std::string()) == "function" &&
                                       t.contains("function") && t["function"].is_object() &&
                                       t["function"].contains("name") && t["function"]["name"].is_string()))
      f.fail(bad_request(fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i), "tools"));
}

// Reads every chat field besides the shared ones into `base`, `plan` and the inputs rendering needs.
ApiResult<ChatInputs> read_chat_fields(const Json& body, const ServedModel& served, Request& base, GenerationPlan& plan) {
  auto messages_it = body.find("messages");
  if (messages_it == body.end() || messages_it->is_null()) return bad_request("'messages' is required", "messages");
  auto messages = normalize_messages(*messages_it);
  if (!messages.ok()) return messages.error();
  ChatInputs in{.messages = std::move(*messages)};
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
  f.read_bool("add_generation_prompt", in.add_generation_prompt);
  if (const Json* v = f.get("continue_final_message"); v && *v != false)
    f.fail(bad_request("'continue_final_message' is not supported", "continue_final_message"));
  const Json* tools = f.get("tools");
  check_tools(f, tools);
  auto forced = forced_tools(f.get("tool_choice"), tools);
  if (!forced.ok()) f.fail(forced.error());
  f.read_string("reasoning_effort", in.reasoning_effort);
  if (!in.reasoning_effort.empty() && !parse_reasoning_effort(in.reasoning_effort))
    f.fail(bad_request(fmt::format("'reasoning_effort' must be \"low\", \"medium\" or \"high\", got \"{}\"", in.reasoning_effort),
                       "reasoning_effort"));
  const Json* kwargs = f.get("chat_template_kwargs");
  if (kwargs && !kwargs->is_object())
    f.fail(bad_request(fmt::format("'chat_template_kwargs' must be an object, got {}", json_type_name(*kwargs)), "chat_template_kwargs"));
  if (f.error()) return *f.error();
  if (logprobs) {
    base.sampling.top_logprobs = top_logprobs;
    plan.logprobs = true;
  }
  if (Status s = base.sampling.validate(); !s.ok()) return bad_request(s.message());
  const Json* choice = f.get("tool_choice");
  const bool no_tools = !tools || tools->empty() || (choice && *choice == "none");
  if (!no_tools) in.tools = *tools;
  if (*forced) in.forced = std::move(**forced);
  if (kwargs) in.kwargs = *kwargs;
  return in;
}

// What follows "<|start|>assistant" in a final answer.
constexpr std::string_view kFinalOpening = "<|channel|>final<|message|>";

// Structured output holds a reply from its first token, so a harmony reply it constrains (a forced call,
// response_format) gets its message header from the prompt: the call's, or the final channel's (the JSON
// is the answer; no reasoning comes first).
std::optional<ApiError> open_harmony_reply(const ChatInputs& in, Request& base, RenderedChat& out) {
  if (!in.forced && !base.json_schema) return std::nullopt;
  if (!out.prompt.ends_with("<|start|>assistant"))
    return bad_request("a forced tool call or response_format needs the prompt to end with the assistant's turn "
                       "('add_generation_prompt'): the reply's header is written after it",
                       in.forced ? "tool_choice" : "response_format");
  std::string opening(kFinalOpening);
  if (in.forced) {
    auto call = force_harmony_tool_call(*in.forced, base);
    if (!call.ok()) return call.error();
    opening = std::move(*call);
  }
  out.prompt += opening;
  out.format.reply_prefix = std::move(opening);
  return std::nullopt;
}

// The model's Jinja chat template; the reply format is read off the template's text.
ApiResult<RenderedChat> render_with_template(const ChatInputs& in, const Expected<ChatTemplate>& chat_template,
                                             Request& base) {
  if (!chat_template.ok()) return bad_request(chat_template.status().message(), "messages");
  Json kwargs = in.kwargs;
  // GPT-OSS's own template reads it; other templates ignore it.
  if (!in.reasoning_effort.empty() && !kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = in.reasoning_effort;
  auto rendered = chat_template->render(in.messages, in.tools, in.add_generation_prompt, kwargs);
  if (!rendered.ok()) return bad_request(fmt::format("the chat template failed: {}", rendered.status().message()), "messages");
  if (rendered->empty()) return bad_request("the chat template rendered an empty prompt", "messages");
  RenderedChat out{.format = detect_output_format(chat_template->source(), *rendered, !in.tools.is_null())};
  out.prompt = std::move(*rendered);
  if (!in.tools.is_null() && out.format.tools == ToolFormat::kNone)
    return bad_request("'tools' were given, but this model's chat template uses no tool-call format Drift parses "
                       "(Hermes <tool_call>, Llama 3 <|python_tag|> JSON, harmony)",
                       "tools");
  if (out.format.harmony) {
    if (auto e = open_harmony_reply(in, base, out)) return *e;
  } else if (in.forced) {
    if (auto e = force_tool_call(out.format.tools, *in.forced, base)) return *e;
  }
  return out;
}

// Today in UTC as harmony's system message writes it ("Current date: 2025-06-28").
std::string utc_date_today() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &utc);
  return text;
}

// GPT-OSS: the harmony renderer, not the folder's Jinja template (which real checkpoints ship too). The
// reply parser, forced calls and reasoning_effort depend on the exact layout the renderer writes, and
// the renderer is tested against format.md; a template may differ from it in small ways (and converted
// folders may have none). vLLM renders gpt-oss prompts with openai_harmony for the same reason.
// chat_template_kwargs do not apply.
ApiResult<RenderedChat> render_with_harmony(const ChatInputs& in, Request& base) {
  HarmonyPromptOptions options{.reasoning_effort = parse_reasoning_effort(in.reasoning_effort),
                               .current_date = utc_date_today(),
                               .add_generation_prompt = in.add_generation_prompt};
  auto prompt = render_harmony_prompt(in.messages, in.tools, options);
  if (!prompt.ok()) return prompt.error();
  RenderedChat out{.prompt = std::move(*prompt),
                   .format = {.tools = in.tools.is_null() ? ToolFormat::kNone : ToolFormat::kHarmony, .harmony = true}};
  if (auto e = open_harmony_reply(in, base, out)) return *e;
  return out;
}

}  // namespace

ApiResult<GenerationPlan> parse_chat_request(const Json& body, const ServedModel& served,
                                             const Expected<ChatTemplate>& chat_template, std::string plan_id) {
  auto started = start_plan(body, served, Api::kChat, std::move(plan_id));
  if (!started.ok()) return started.error();
  GenerationPlan& plan = *started;
  Request base;
  base.max_tokens = served.max_model_len;  // without a limit a chat reply may fill the context
  auto inputs = read_chat_fields(body, served, base, plan);
  if (!inputs.ok()) return inputs.error();
  auto rendered = served.harmony ? render_with_harmony(*inputs, base) : render_with_template(*inputs, chat_template, base);
  if (!rendered.ok()) return rendered.error();
  plan.output_format = std::move(rendered->format);
  const ChatOutputFormat& format = plan.output_format;
  plan.parse_output = format.tools != ToolFormat::kNone || format.think_tags || format.harmony;
  // The engine tokenizes it, as it does a completion's text; the renderer wrote the special tokens.
  Request prompt;
  prompt.prompt = std::move(rendered->prompt);
  prompt.add_special_tokens = false;
  expand_choices(base, {std::move(prompt)}, plan);
  return std::move(plan);
}

}  // namespace drift::server
