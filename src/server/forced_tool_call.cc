#include "server/forced_tool_call.h"

#include <fmt/format.h>

#include "tokenizer/harmony.h"

namespace drift::server {

ApiResult<std::optional<Json>> forced_tools(const Json* choice, const Json* tools) {
  if (choice == nullptr || choice->is_null() || *choice == "none" || *choice == "auto") return std::optional<Json>();
  const Json list = tools && tools->is_array() ? *tools : Json::array();
  if (*choice == "required") {
    if (list.empty()) return bad_request("'tool_choice' is \"required\" but no tools were given", "tool_choice");
    return std::optional<Json>(list);
  }
  const bool named = choice->is_object() && choice->value("type", std::string()) == "function" &&
                     choice->contains("function") && (*choice)["function"].is_object() &&
                     (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string();
  if (!named)
    return bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}",
                       "tool_choice");
  const std::string name = (*choice)["function"]["name"];
  for (const Json& t : list) {
    const Json* function = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (function && function->is_object() && function->value("name", std::string()) == name)
      return std::optional<Json>(Json::array({t}));
  }
  return bad_request(fmt::format("'tool_choice' names '{}', which is not among the tools", name), "tool_choice");
}

namespace {

// The schema of a function's arguments: its parameters, or any object when it declares none.
Json arguments_schema(const Json& function) {
  return function.contains("parameters") ? function["parameters"] : Json{{"type", "object"}};
}

}  // namespace

std::optional<ApiError> force_tool_call(ToolFormat format, const Json& tools, Request& request) {
  const char* arguments_key = format == ToolFormat::kLlama3Json ? "parameters" : "arguments";
  Json calls = Json::array();
  for (const Json& tool : tools) {
    const Json& function = tool["function"];
    const Json parameters = arguments_schema(function);
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", function["name"]}}}, {arguments_key, parameters}}},
                     {"required", {"name", arguments_key}},
                     {"additionalProperties", false}});
  }
  const Json schema = calls.size() == 1 ? calls[0] : Json{{"anyOf", calls}};
  request.json_schema = schema.dump();
  switch (format) {
    case ToolFormat::kHermes:
      request.json_prefix = "<tool_call>\n";
      request.json_suffix = "\n</tool_call>";
      return std::nullopt;
    case ToolFormat::kLlama3Json:
      return std::nullopt;
    default:
      return bad_request("a forced tool call ('tool_choice' \"required\" or a named function) is supported for "
                         "Hermes, Llama 3 JSON and harmony tool formats, not this model's",
                         "tool_choice");
  }
}

ApiResult<std::string> force_harmony_tool_call(const Json& tools, Request& request) {
  if (tools.size() != 1)
    return bad_request(fmt::format("'tool_choice' \"required\" with {} tools is not supported for harmony (GPT-OSS): "
                                   "a harmony call names its function in the message header, which structured output "
                                   "cannot constrain; name the function ({{\"type\": \"function\", \"function\": "
                                   "{{\"name\": ...}}}}) or give one tool",
                                   tools.size()),
                       "tool_choice");
  const Json& function = tools[0]["function"];
  request.json_schema = arguments_schema(function).dump();
  return tokenizer::harmony::tool_call_opening(function["name"].get<std::string>());
}

}  // namespace drift::server
