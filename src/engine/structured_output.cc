// Structured output in the engine loop: a request's JSON Schema compiled at submit, a token mask per
// constrained row each step (computed here, applied by whichever sampler runs), and the matcher moved
// over every accepted token.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine_impl.h"

namespace drift::engine {

namespace {

// Blanks allowed in a row between JSON tokens: enough for ", " and ": " and a newline; a cap keeps a
// model from spending its budget on whitespace.
constexpr int32_t kMaxWhitespace = 2;

}  // namespace

Status EngineImpl::attach_schema(RequestState& state, const Request& request) {
  if (!request.json_schema) return Status::Ok();
  const std::string& text = *request.json_schema;
  nlohmann::json schema = text.empty() ? nlohmann::json() : nlohmann::json::parse(text, nullptr, false);
  if (schema.is_discarded()) return invalid_argument("json_schema is not valid JSON");
  // "{}" is the empty schema, which any value matches; structured output asks for an object then.
  if (schema.is_object() && schema.empty()) schema = nullptr;
  DRIFT_ASSIGN_OR_RETURN(structured::CompiledSchema compiled, structured::CompiledSchema::compile(schema));
  state.structured = std::make_unique<const RequestState::Structured>(
      RequestState::Structured{std::move(compiled), request.json_prefix, request.json_suffix});
  const RequestState::Structured& s = *state.structured;
  state.matcher.emplace(s.schema.root(), kMaxWhitespace, &s.prefix, &s.suffix);
  std::call_once(vocab_index_once_, [this] {
    vocab_index_ = std::make_unique<structured::VocabIndex>(*tokenizer_, int32_t(model_->vocab_size()));
  });
  return Status::Ok();
}

std::vector<std::span<uint32_t>> EngineImpl::layout_masks(const core::BatchPlan& plan) {
  std::vector<std::span<uint32_t>> masks(plan.seqs.size());
  size_t constrained = 0;
  // A request that ended since its step was planned (overlapped scheduling) gets no mask.
  auto constrained_at = [&](size_t k) {
    const auto it = requests_.find(plan.seqs[k].seq_id);
    return it != requests_.end() && it->second->matcher && runner::ModelRunner::num_logits(plan.seqs[k]) > 0;
  };
  for (size_t k = 0; k < plan.seqs.size(); ++k) constrained += constrained_at(k) ? 1 : 0;
  // A constrained request came through the inbox after attach_schema built the index: reading it is safe.
  if (constrained == 0) return masks;
  const size_t words = size_t(vocab_index_->words());
  masks_.resize(constrained * words);  // sized before any span into it is taken
  size_t next = 0;
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    if (!constrained_at(k)) continue;
    masks[k] = std::span<uint32_t>(masks_.data() + next * words, words);
    ++next;
  }
  return masks;
}

void EngineImpl::fill_masks(const core::BatchPlan& plan, std::span<const std::span<uint32_t>> masks) {
  mask_rows_.clear();
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    if (masks[k].empty()) continue;
    const RequestState& state = *requests_.at(plan.seqs[k].seq_id);
    const std::span<const int32_t> stops =
        state.request.ignore_eos ? std::span<const int32_t>() : std::span<const int32_t>(eos_token_ids_);
    mask_rows_.push_back({&*state.matcher, stops, masks[k]});
  }
  if (mask_rows_.empty()) return;
  if (!mask_filler_) {
    const int32_t threads = config_.mask_threads > 0 ? config_.mask_threads : structured::default_mask_threads();
    mask_filler_ = std::make_unique<structured::MaskFiller>(*vocab_index_, threads);
  }
  mask_filler_->fill(mask_rows_);
}

Expected<bool> EngineImpl::advance_schema(RequestState& state, int32_t token) {
  if (!state.matcher->advance(tokenizer_->token_bytes(token)))
    return internal_error(fmt::format("token {} does not continue the JSON the schema allows", token));
  return state.matcher->finished();
}

}  // namespace drift::engine
