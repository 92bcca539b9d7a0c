// tool_choice "required" or {"type": "function", "function": {"name": ...}}: the reply must be exactly one
// call of that tool, in the model's own tool-call format, with arguments that validate against the tool's
// parameters. Done with structured output: the call's JSON is the schema, the format's markers the text
// around it (Request::json_prefix/json_suffix).
#pragma once

#include <optional>
#include <string>

#include "drift/request.h"
#include "server/api_error.h"
#include "server/chat_output_parser.h"
#include "server/field_reader.h"

namespace drift::server {

// The tool `tool_choice` forces: none (null, "none", "auto"), or the one named, or the only tool for
// "required". Errors name the field.
ApiResult<std::optional<Json>> forced_tool(const Json* tool_choice, const Json* tools);

// Constrains `request` to one call of `tool` written in `format`; an error when the format has no way to
// force a call.
std::optional<ApiError> force_tool_call(ToolFormat format, const Json& tool, Request& request);

}  // namespace drift::server
