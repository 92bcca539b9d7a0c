// Parses a POST /v1/completions body into a GenerationPlan. "prompt" may be a string, a list of strings,
// a list of token ids or a list of token-id lists; every prompt gets n choices.
#pragma once

#include "server/api_error.h"
#include "server/field_reader.h"
#include "server/generation_plan.h"

namespace drift::server {

// `plan_id` becomes GenerationPlan::id; string prompts are tokenized by the engine (with BOS).
ApiResult<GenerationPlan> parse_completion_request(const Json& body, const ServedModel& served, std::string plan_id);

}  // namespace drift::server
