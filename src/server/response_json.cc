#include "server/response_json.h"

namespace drift::server {

namespace {

const char* object_name(const GenerationPlan& plan, bool chunk) {
  if (plan.api == Api::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

Json header(const GenerationPlan& plan, bool chunk) {
  Json j;
  j["id"] = plan.id;
  j["object"] = object_name(plan, chunk);
  j["created"] = plan.created;
  j["model"] = plan.model;
  return j;
}

Json stop_reason_json(const Output& final) {
  if (final.finish_reason != FinishReason::kStop || final.stop_reason.empty()) return nullptr;
  return final.stop_reason;
}

Json byte_list(std::string_view bytes) {
  Json list = Json::array();
  for (unsigned char c : bytes) list.push_back(int(c));
  return list;
}

Json chat_token_json(const tokenizer::Tokenizer& tok, int32_t token, float logprob) {
  const int32_t ids[] = {token};
  return {{"token", tok.decode(ids)}, {"logprob", logprob}, {"bytes", byte_list(tok.token_bytes(token))}};
}

// {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}
Json chat_logprobs_json(std::span<const TokenLogprobs> lps, const tokenizer::Tokenizer& tok) {
  Json content = Json::array();
  for (const TokenLogprobs& lp : lps) {
    Json entry = chat_token_json(tok, lp.token, lp.logprob);
    Json top = Json::array();
    for (const auto& [id, value] : lp.top) top.push_back(chat_token_json(tok, id, value));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

// {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}; offsets count bytes of
// decoded token text from `offset`, the start of these tokens in the choice's text.
Json completion_logprobs_json(std::span<const TokenLogprobs> lps, const tokenizer::Tokenizer& tok, size_t offset) {
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const TokenLogprobs& lp : lps) {
    const int32_t ids[] = {lp.token};
    const std::string text = tok.decode(ids);
    tokens.push_back(text);
    values.push_back(lp.logprob);
    Json top = Json::object();
    for (const auto& [id, value] : lp.top) {
      const int32_t top_ids[] = {id};
      top[tok.decode(top_ids)] = value;
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

Json logprobs_json(const GenerationPlan& plan, std::span<const TokenLogprobs> lps, const tokenizer::Tokenizer& tok,
                   size_t offset) {
  if (!plan.logprobs) return nullptr;
  return plan.api == Api::kChat ? chat_logprobs_json(lps, tok) : completion_logprobs_json(lps, tok, offset);
}

}  // namespace

const char* openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    default: return "abort";
  }
}

Json usage_json(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const Usage& u = choices[i].final.usage;
    completion += u.completion_tokens;
    if (i % size_t(plan.n) == 0) {
      prompt += u.prompt_tokens;
      cached += u.cached_tokens;
    }
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

namespace {

// OpenAI's ids are opaque; these are unique per call, choice and position.
std::string tool_call_id(const GenerationPlan& plan, size_t choice, size_t index) {
  return "call_" + plan.id.substr(plan.id.find('-') + 1) + "_" + std::to_string(choice) + "_" + std::to_string(index);
}

Json tool_call_json(const GenerationPlan& plan, size_t choice, size_t index, const ParsedToolCall& call) {
  Json j;
  j["id"] = tool_call_id(plan, choice, index);
  j["type"] = "function";
  j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

// A streamed piece: the call's first piece carries its id, type and name, as OpenAI's streams do; the
// rest only their part of the arguments.
Json tool_call_delta_json(const GenerationPlan& plan, size_t choice, const ToolCallDelta& piece) {
  if (piece.name.empty()) return {{"index", piece.index}, {"function", {{"arguments", piece.arguments}}}};
  Json j = {{"index", piece.index}};
  j.update(tool_call_json(plan, choice, size_t(piece.index), {piece.name, piece.arguments}));
  return j;
}

// A finished choice that called tools ends with "tool_calls", as OpenAI's do.
Json finish_json(const Output& final, bool made_tool_calls) {
  if (made_tool_calls && final.finish_reason == FinishReason::kStop) return "tool_calls";
  return openai_finish_reason(final.finish_reason);
}

Json chat_message_json(const GenerationPlan& plan, size_t choice, const ChoiceResult& c) {
  if (!plan.parse_output) return {{"role", "assistant"}, {"content", c.text}};
  const ParsedChat parsed = parse_chat_output(plan.output_format, c.text, true);
  Json m = {{"role", "assistant"}};
  m["content"] = parsed.content.empty() && !parsed.tool_calls.empty() ? Json(nullptr) : Json(parsed.content);
  if (!parsed.reasoning.empty()) m["reasoning_content"] = parsed.reasoning;
  if (!parsed.tool_calls.empty()) {
    Json calls = Json::array();
    for (size_t i = 0; i < parsed.tool_calls.size(); ++i)
      calls.push_back(tool_call_json(plan, choice, i, parsed.tool_calls[i]));
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

}  // namespace

Json response_json(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices, const tokenizer::Tokenizer& tok) {
  Json j = header(plan, false);
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    Json choice;
    choice["index"] = i;
    bool made_tool_calls = false;
    if (plan.api == Api::kChat) {
      choice["message"] = chat_message_json(plan, i, c);
      made_tool_calls = choice["message"].contains("tool_calls");
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = logprobs_json(plan, c.logprobs, tok, 0);
    choice["finish_reason"] = finish_json(c.final, made_tool_calls);
    choice["stop_reason"] = stop_reason_json(c.final);
    list.push_back(std::move(choice));
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_json(plan, choices);
  return j;
}

Json chunk_json(const GenerationPlan& plan, const ChunkPart& part, const tokenizer::Tokenizer& tok) {
  Json j = header(plan, true);
  Json choice;
  choice["index"] = part.index;
  if (plan.api == Api::kChat) {
    Json delta = Json::object();
    if (!part.reasoning.empty()) delta["reasoning_content"] = part.reasoning;
    if (!part.text.empty() || (!part.finish && part.reasoning.empty() && part.tool_calls.empty()))
      delta["content"] = part.text;
    if (!part.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCallDelta& piece : part.tool_calls) calls.push_back(tool_call_delta_json(plan, size_t(part.index), piece));
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = part.text;
  }
  choice["logprobs"] = part.logprobs.empty() ? Json(nullptr) : logprobs_json(plan, part.logprobs, tok, part.text_offset);
  choice["finish_reason"] = part.finish ? finish_json(*part.finish, part.made_tool_calls) : Json(nullptr);
  if (part.finish) choice["stop_reason"] = stop_reason_json(*part.finish);
  j["choices"] = Json::array({std::move(choice)});
  if (plan.include_usage) j["usage"] = nullptr;
  return j;
}

Json role_chunk_json(const GenerationPlan& plan, int32_t index) {
  Json j = header(plan, true);
  Json choice;
  choice["index"] = index;
  choice["delta"] = {{"role", "assistant"}, {"content", ""}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  j["choices"] = Json::array({std::move(choice)});
  if (plan.include_usage) j["usage"] = nullptr;
  return j;
}

Json usage_chunk_json(const GenerationPlan& plan, Json usage) {
  Json j = header(plan, true);
  j["choices"] = Json::array();
  j["usage"] = std::move(usage);
  return j;
}

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace drift::server
