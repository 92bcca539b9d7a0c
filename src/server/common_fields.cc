#include "server/common_fields.h"

#include <fmt/format.h>

#include <limits>

namespace drift::server {

namespace {

constexpr int32_t kMaxChoices = 128;
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// Fields OpenAI or vLLM define that this engine cannot honour: answering as if they were honoured would
// mislead the client, so a non-default value is refused.
void refuse_unsupported(FieldReader& fields, const GenerationPlan& plan) {
  if (const Json* v = fields.get("logit_bias"); v && !(v->is_object() && v->empty()))
    fields.fail(bad_request("'logit_bias' is not supported", "logit_bias"));
  if (const Json* v = fields.get("min_tokens"); v && !(v->is_number() && v->get<double>() == 0))
    fields.fail(bad_request("'min_tokens' is not supported", "min_tokens"));
  if (const Json* v = fields.get("use_beam_search"); v && *v != false)
    fields.fail(bad_request("'use_beam_search' is not supported", "use_beam_search"));
  if (const Json* v = fields.get("include_stop_str_in_output"); v && *v != false)
    fields.fail(bad_request("'include_stop_str_in_output' is not supported: stop strings are always removed",
                            "include_stop_str_in_output"));
  if (const Json* v = fields.get("best_of"); v && !(v->is_number() && v->get<double>() == double(plan.n)))
    fields.fail(bad_request("'best_of' must equal 'n' (best-of sampling is not supported)", "best_of"));
}

// response_format: {"type": "text"}, {"type": "json_object"} (any JSON object) or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}}; the engine compiles the schema and masks every step.
void read_response_format(FieldReader& fields, Request& base) {
  const Json* v = fields.get("response_format");
  if (v == nullptr || v->is_null()) return;
  const std::string type = v->is_object() ? v->value("type", std::string()) : std::string();
  if (type == "text") return;
  if (type == "json_object") {
    base.json_schema = "";
    return;
  }
  if (type == "json_schema") {
    const Json* spec = v->contains("json_schema") ? &(*v)["json_schema"] : nullptr;
    if (spec && spec->is_object() && spec->contains("schema") && (*spec)["schema"].is_object()) {
      base.json_schema = (*spec)["schema"].dump();
      return;
    }
    return fields.fail(bad_request("'response_format.json_schema.schema' must be a JSON Schema object", "response_format"));
  }
  fields.fail(bad_request("'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                          "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": ...}}",
                          "response_format"));
}

}  // namespace

std::optional<ApiError> check_model(const Json& body, const ServedModel& served) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return bad_request(fmt::format("'model' must be a string, got {}", json_type_name(*it)), "model");
  const std::string model = it->get<std::string>();
  // vllm bench serve and other clients often send the model's folder rather than its name.
  if (model != served.name && model != served.root) {
    ApiError e = not_found_error(fmt::format("The model '{}' does not exist; this server serves '{}'", model, served.name), "model");
    e.code = "model_not_found";
    return e;
  }
  return std::nullopt;
}

ApiResult<GenerationPlan> start_plan(const Json& body, const ServedModel& served, Api api, std::string plan_id) {
  if (!body.is_object()) return bad_request(fmt::format("the request body must be a JSON object, got {}", json_type_name(body)));
  if (auto e = check_model(body, served)) return *e;
  GenerationPlan plan;
  plan.api = api;
  plan.id = std::move(plan_id);
  plan.model = served.name;
  return plan;
}

void read_common_fields(FieldReader& f, const ServedModel& served, Request& base, GenerationPlan& plan) {
  SamplingParams& s = base.sampling;
  f.read_int("max_tokens", base.max_tokens, 1, kMaxInt32);
  // An explicit limit the context cannot hold is an error (as OpenAI and vLLM answer), unless the client
  // asks for it to be cut to what is left ("clamp_max_tokens", Drift's extension).
  base.max_tokens_must_fit = f.get("max_tokens") != nullptr;
  bool clamp = false;
  f.read_bool("clamp_max_tokens", clamp);
  f.read_float("temperature", s.temperature, 0.0, 1e6);
  f.read_float("top_p", s.top_p, 0.0, 1.0, LowerBound::kOpen);
  f.read_int("top_k", s.top_k, -1, kMaxInt32);
  f.read_float("min_p", s.min_p, 0.0, 1.0);
  f.read_float("repetition_penalty", s.repetition_penalty, 0.0, 1e6, LowerBound::kOpen);
  f.read_float("presence_penalty", s.presence_penalty, -2.0, 2.0);
  f.read_float("frequency_penalty", s.frequency_penalty, -2.0, 2.0);
  f.read_seed("seed", s.seed);
  f.read_string_list("stop", base.stop);
  f.read_int_list("stop_token_ids", base.stop_token_ids, 0, served.vocab_size - 1);
  f.read_bool("ignore_eos", base.ignore_eos);
  // Drift's extension: with SpecPV on, every verify step of this request reads its whole KV.
  f.read_bool("exact_verification", base.exact_verification);
  // vLLM's extension: waiting requests of a lower value are scheduled first (and preempted last).
  f.read_int("priority", base.priority, std::numeric_limits<int32_t>::min(), kMaxInt32);
  f.read_int("n", plan.n, 1, kMaxChoices);
  f.read_bool("stream", plan.stream);
  std::string user;
  f.read_string("user", user);
  if (const Json* options = f.get("stream_options")) {
    if (!options->is_object()) {
      f.fail(bad_request(fmt::format("'stream_options' must be an object, got {}", json_type_name(*options)), "stream_options"));
    } else {
      FieldReader nested(*options);
      nested.read_bool("include_usage", plan.include_usage);
      if (nested.error()) f.fail(bad_request("'stream_options.include_usage' must be a boolean", "stream_options"));
    }
  }
  refuse_unsupported(f, plan);
  read_response_format(f, base);
  if (clamp) base.max_tokens_must_fit = false;
}

void expand_choices(const Request& base, std::vector<Request> prompts, GenerationPlan& plan) {
  plan.choices.clear();
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int32_t j = 0; j < plan.n; ++j) {
      Request r = base;
      r.prompt = prompts[p].prompt;
      r.prompt_tokens = prompts[p].prompt_tokens;
      r.add_special_tokens = prompts[p].add_special_tokens;
      if (base.sampling.seed) r.sampling.seed = *base.sampling.seed + uint64_t(j);
      r.id = fmt::format("{}-{}", plan.id, plan.choices.size());
      plan.choices.push_back(std::move(r));
    }
  }
}

}  // namespace drift::server
