// The request fields /v1/completions and /v1/chat/completions share: model, sampling, stop conditions,
// n, streaming, and the vLLM/SGLang extensions (top_k, min_p, repetition_penalty, ignore_eos,
// stop_token_ids). Fields the engine cannot honour are refused rather than silently ignored.
#pragma once

#include "server/field_reader.h"
#include "server/generation_plan.h"

namespace drift::server {

// Checks "model" against the served model; a missing model means the served one.
std::optional<ApiError> check_model(const Json& body, const ServedModel& served);

// The plan of a body that is a JSON object asking for the served model: its api, id and model set.
ApiResult<GenerationPlan> start_plan(const Json& body, const ServedModel& served, Api api, std::string plan_id);

// Reads the shared fields into `base` (the request every choice copies) and `plan` (n, stream,
// include_usage). max_tokens keeps the value `base` arrives with when the body has none.
void read_common_fields(FieldReader& fields, const ServedModel& served, Request& base, GenerationPlan& plan);

// One engine request per prompt and choice; with a seed, choice j samples with seed + j so the choices
// differ and every one is reproducible.
void expand_choices(const Request& base, std::vector<Request> prompts, GenerationPlan& plan);

}  // namespace drift::server
