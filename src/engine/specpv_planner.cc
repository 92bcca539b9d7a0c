#include "engine/specpv_planner.h"

#include <numeric>

namespace drift::engine {

SpecPvPlanner::SpecPvPlanner(const SpecPvConfig& config, std::vector<core::KvSpec> kv_specs, int32_t block_size)
    : config_(config), kv_specs_(std::move(kv_specs)), block_size_(block_size) {}

bool SpecPvPlanner::partial_step(int64_t seq_id, int32_t verified) {
  SeqState& st = seqs_[seq_id];
  const bool buffer_full = st.full_len < 0 || verified - st.full_len > config_.buffer;
  if (buffer_full || st.partials_in_row + 1 >= config_.refresh) {
    st = {.full_len = verified, .partials_in_row = 0};
    ++num_full_;
    return false;
  }
  ++st.partials_in_row;
  ++num_partial_;
  return true;
}

std::vector<core::PartialView> SpecPvPlanner::views_of(const core::ScheduledSeq& s) const {
  const int32_t num_tokens = s.num_computed + s.num_new;
  const core::PartialBudget budget{.sink = config_.sink, .retrieval = config_.retrieval, .window = config_.window,
                                   .buffer = config_.buffer + s.seq->num_draft_tokens};
  // Recency: a later block scores higher (see the header).
  std::vector<float> scores(size_t((num_tokens + block_size_ - 1) / block_size_));
  std::iota(scores.begin(), scores.end(), 0.0f);
  std::vector<core::PartialView> views(kv_specs_.size());
  for (size_t g = 0; g < kv_specs_.size(); ++g)
    if (kv_specs_[g].sliding_window == 0)
      views[g] = core::compose_partial_view(s.seq->block_tables[g], num_tokens, block_size_, scores, budget);
  return views;
}

std::vector<std::vector<core::PartialView>> SpecPvPlanner::plan_views(const core::BatchPlan& plan) {
  std::vector<std::vector<core::PartialView>> views(plan.seqs.size());
  bool any = false;
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    const core::ScheduledSeq& s = plan.seqs[k];
    const int32_t drafts = s.seq->num_draft_tokens;
    // A verify step: it samples, and its drafts are among its new tokens.
    if (!s.samples || drafts == 0 || s.seq->num_tokens() < config_.min_context) continue;
    if (!partial_step(s.seq_id, s.seq->num_tokens() - drafts)) continue;
    views[k] = views_of(s);
    any = true;
  }
  if (!any) views.clear();
  return views;
}

}  // namespace drift::engine
