#include "server/completion_request.h"

#include <fmt/format.h>

#include "server/common_fields.h"

namespace drift::server {

namespace {

constexpr int32_t kCompletionDefaultMaxTokens = 16;  // OpenAI's and vLLM's default for /v1/completions
constexpr int32_t kMaxLogprobs = 20;

bool is_token_id(const Json& v) { return v.is_number_integer(); }

// The prompts of "prompt", each as text or as token ids; an error names what is wrong with it.
ApiResult<std::vector<Request>> read_prompts(const Json& body, const ServedModel& served) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad_request("'prompt' is required", "prompt");
  const Json& p = *it;
  const auto token_list = [&](const Json& ids) -> ApiResult<Request> {
    Request r;
    for (const Json& id : ids) {
      if (!is_token_id(id)) return bad_request("'prompt' token-id lists must hold only integers", "prompt");
      const int64_t t = id.get<int64_t>();
      if (t < 0 || t >= served.vocab_size)
        return bad_request(fmt::format("'prompt' token id {} is outside the vocabulary [0, {})", t, served.vocab_size), "prompt");
      r.prompt_tokens.push_back(int32_t(t));
    }
    if (r.prompt_tokens.empty()) return bad_request("'prompt' must not be empty", "prompt");
    return r;
  };
  const auto text = [](const Json& s) -> ApiResult<Request> {
    Request r;
    r.prompt = s.get<std::string>();
    if (r.prompt.empty()) return bad_request("'prompt' must not be empty", "prompt");
    return r;
  };
  std::vector<Request> prompts;
  const auto add = [&](ApiResult<Request> r) -> std::optional<ApiError> {
    if (!r.ok()) return r.error();
    prompts.push_back(std::move(*r));
    return std::nullopt;
  };
  if (p.is_string()) {
    if (auto e = add(text(p))) return *e;
  } else if (p.is_array() && !p.empty() && is_token_id(p.front())) {
    if (auto e = add(token_list(p))) return *e;
  } else if (p.is_array() && !p.empty()) {
    for (const Json& item : p) {
      std::optional<ApiError> e;
      if (item.is_string()) {
        e = add(text(item));
      } else if (item.is_array()) {
        e = add(token_list(item));
      } else {
        e = bad_request(fmt::format("'prompt' items must be strings or token-id lists, found {}", json_type_name(item)), "prompt");
      }
      if (e) return *e;
    }
  } else if (p.is_array()) {
    return bad_request("'prompt' must not be empty", "prompt");
  } else {
    return bad_request(fmt::format("'prompt' must be a string, a list of strings, a list of token ids or a list of "
                                   "token-id lists, got {}",
                                   json_type_name(p)),
                       "prompt");
  }
  return prompts;
}

}  // namespace

ApiResult<GenerationPlan> parse_completion_request(const Json& body, const ServedModel& served, std::string plan_id) {
  auto started = start_plan(body, served, Api::kCompletion, std::move(plan_id));
  if (!started.ok()) return started.error();
  GenerationPlan& plan = *started;
  auto prompts = read_prompts(body, served);
  if (!prompts.ok()) return prompts.error();

  Request base;
  base.max_tokens = kCompletionDefaultMaxTokens;
  FieldReader f(body);
  read_common_fields(f, served, base, plan);
  int32_t logprobs = -1;
  f.read_int("logprobs", logprobs, 0, kMaxLogprobs);
  if (const Json* echo = f.get("echo"); echo && *echo != false) f.fail(bad_request("'echo' is not supported", "echo"));
  if (const Json* suffix = f.get("suffix"); suffix && *suffix != "") f.fail(bad_request("'suffix' is not supported", "suffix"));
  if (f.error()) return *f.error();
  if (logprobs >= 0) {
    base.sampling.top_logprobs = logprobs;
    plan.logprobs = true;
  }
  if (Status s = base.sampling.validate(); !s.ok()) return bad_request(s.message());
  expand_choices(base, std::move(*prompts), plan);
  return std::move(plan);
}

}  // namespace drift::server
