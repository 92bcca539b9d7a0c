// Parses a POST /v1/chat/completions body into a GenerationPlan: checks "messages" and renders them with
// the model's chat template into the request's prompt text, which the engine tokenizes (as it does a
// completion's) without adding special tokens: the template already wrote BOS.
#pragma once

#include "server/api_error.h"
#include "server/chat_template.h"
#include "server/field_reader.h"
#include "server/generation_plan.h"

namespace drift::server {

// `chat_template` holds the model's template or the reason it has none (answered as a 400).
ApiResult<GenerationPlan> parse_chat_request(const Json& body, const ServedModel& served,
                                             const Expected<ChatTemplate>& chat_template, std::string plan_id);

// Messages as templates expect them: content given as a list of text parts becomes one string.
ApiResult<Json> normalize_messages(const Json& messages);

}  // namespace drift::server
