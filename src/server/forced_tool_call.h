// tool_choice "required" or {"type": "function", "function": {"name": ...}}: the reply must be exactly one
// call of a given tool (the named one), in the model's own tool-call format, with arguments that validate
// against the tool's parameters. Done with structured output: the call's JSON is the schema, the format's
// markers the text around it (Request::json_prefix/json_suffix). Harmony is the exception: its call names
// the function in the message header, in special tokens structured output cannot write, so the prompt
// ends with that header and the schema is the arguments alone.
#pragma once

#include <optional>
#include <string>

#include "drift/request.h"
#include "server/api_error.h"
#include "server/chat_output_parser.h"
#include "server/field_reader.h"

namespace drift::server {

// The tools `tool_choice` forces a call among, as an array: none (null, "none", "auto"), the one named,
// or every tool for "required". Errors name the field.
ApiResult<std::optional<Json>> forced_tools(const Json* tool_choice, const Json* tools);

// Constrains `request` to one call of one of `tools` written in `format` (several: a tagged union, the
// name choosing the arguments' schema); an error when the format has no way to force a call.
std::optional<ApiError> force_tool_call(ToolFormat format, const Json& tools, Request& request);

// Harmony: holds `request` to arguments for the one tool in `tools` and returns the header the prompt must
// end with (after "<|start|>assistant"). Several tools ("required") are refused: only the header could
// choose among them, and nothing constrains it.
ApiResult<std::string> force_harmony_tool_call(const Json& tools, Request& request);

}  // namespace drift::server
