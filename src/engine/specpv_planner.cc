#include "engine/specpv_planner.h"

#include <algorithm>
#include <cmath>

namespace drift::engine {

SpecPvPlanner::SpecPvPlanner(backend::Ops& ops, const SpecPvConfig& config, std::vector<core::KvSpec> kv_specs,
                             int32_t block_size)
    : config_(config),
      kv_specs_(kv_specs),
      block_size_(block_size),
      scorer_(ops, config.score == "specpv" ? backend::BlockScore::kSpecPv : backend::BlockScore::kQuest,
              std::move(kv_specs), block_size) {}

bool SpecPvPlanner::next_verify_full(int64_t seq_id, int32_t num_tokens, int32_t drafts, bool exact) const {
  if (drafts == 0 || num_tokens < config_.min_context) return false;
  const auto it = seqs_.find(seq_id);
  if (exact || it == seqs_.end()) return true;
  const SeqState& st = it->second;
  const bool buffer_full = st.full_len < 0 || num_tokens - drafts - st.full_len > config_.buffer;
  return buffer_full || st.partials_in_row + 1 >= config_.refresh;
}

bool SpecPvPlanner::partial_step(int64_t seq_id, int32_t num_tokens, int32_t drafts, bool exact) {
  const bool full = next_verify_full(seq_id, num_tokens, drafts, exact);
  SeqState& st = seqs_[seq_id];
  if (full) {
    st = {.full_len = num_tokens - drafts, .partials_in_row = 0};
    ++num_full_;
    return false;
  }
  ++st.partials_in_row;
  ++num_partial_;
  return true;
}

std::vector<core::PartialView> SpecPvPlanner::views_of(const core::ScheduledSeq& s) {
  const int32_t num_tokens = s.num_computed + s.num_new;
  const core::PartialBudget budget{.sink = config_.sink, .retrieval = config_.retrieval, .window = config_.window,
                                   .buffer = config_.buffer + s.seq->num_draft_tokens};
  // The last full verification's scores; blocks it did not cover (and every block, before a sequence's
  // first one) rank by recency above every scored one, since they are the newest.
  const std::span<const float> scored = scorer_.scores(s.seq_id);
  std::vector<float> scores(size_t(core::blocks_for_tokens(num_tokens, block_size_)));
  const float top = scored.empty() ? 0.0f : *std::max_element(scored.begin(), scored.end());
  for (size_t b = 0; b < scores.size(); ++b)
    scores[b] = b < scored.size() ? scored[b] : (std::isfinite(top) ? top : 0.0f) + 1.0f + float(b);
  std::vector<core::PartialView> views(kv_specs_.size());
  for (size_t g = 0; g < kv_specs_.size(); ++g)
    if (kv_specs_[g].sliding_window == 0)
      views[g] = core::compose_partial_view(s.seq->block_tables[g], num_tokens, block_size_, scores, budget);
  return views;
}

std::vector<std::vector<core::PartialView>> SpecPvPlanner::plan_views(const core::BatchPlan& plan,
                                                                      const std::function<bool(int64_t)>& exact) {
  std::vector<std::vector<core::PartialView>> views(plan.seqs.size());
  std::vector<size_t> tracked;  // the full verifications: they score
  bool any = false;
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    const core::ScheduledSeq& s = plan.seqs[k];
    const int32_t drafts = s.seq->num_draft_tokens;
    // A verify step: it samples, and its drafts are among its new tokens.
    if (!s.samples || drafts == 0 || s.seq->num_tokens() < config_.min_context) continue;
    const bool exact_seq = exact && exact(s.seq_id);
    if (!partial_step(s.seq_id, s.seq->num_tokens(), drafts, exact_seq)) {
      if (config_.refresh > 1 && !exact_seq) tracked.push_back(k);  // partial steps will follow
      continue;
    }
    views[k] = views_of(s);
    any = true;
  }
  scorer_.begin_step(plan, tracked);
  if (!any) views.clear();
  return views;
}

}  // namespace drift::engine
