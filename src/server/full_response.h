// Waits for every choice of a non-streaming call and builds its response JSON.
#pragma once

#include <atomic>

#include "server/api_error.h"
#include "server/field_reader.h"
#include "server/generation.h"
#include "server/generation_plan.h"
#include "server/response_json.h"
#include "tokenizer/tokenizer.h"

namespace drift::server {

// A choice that failed turns the whole call into its error; `stopping` (the server shuts down) cancels
// the call and answers 503. `results` receives what each choice produced (for the access log).
ApiResult<Json> collect_full_response(Generation& generation, const GenerationPlan& plan,
                                      const tokenizer::Tokenizer& tokenizer, const std::atomic<bool>& stopping,
                                      std::vector<ChoiceResult>& results);

}  // namespace drift::server
