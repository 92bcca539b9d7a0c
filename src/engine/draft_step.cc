// EAGLE-3 drafting around a target step: which rows of the step each sequence keeps (its hidden-state
// taps feed the draft head), the KV moves that put an accepted tree path at its own positions, and the
// head's catch-up and tree drafting once every sequence of the step is settled.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/check.h"

#include "engine/engine_impl.h"

namespace drift::engine {

void EngineImpl::keep_for_draft(const RequestState& state, const core::Sequence& seq, int32_t first, int32_t token_row,
                                std::span<const int32_t> kept_rows) {
  if (!drafter_ || seq.status != core::SeqStatus::kRunning || seq.leaving()) return;
  spec::DraftInput& in = draft_inputs_.emplace_back();
  in.seq = &seq;
  in.first = first;
  if (kept_rows.empty()) {
    for (int32_t r = 0; r < seq.num_computed - first; ++r) in.tap_rows.push_back(token_row + r);
  } else {
    in.tap_rows.assign(kept_rows.begin(), kept_rows.end());
  }
  in.wants_tree = seq.in_decode() && seq.num_uncomputed() == 1 && speculates(state);
}

void EngineImpl::plan_kv_moves(const core::Sequence& seq, int32_t root, std::span<const int32_t> path) {
  if (kv_moves_from_.size() != kv_specs_.size()) {
    kv_moves_from_.assign(kv_specs_.size(), {});
    kv_moves_to_.assign(kv_specs_.size(), {});
  }
  const int32_t bs = config_.block_size;
  for (const core::KvMove& m : core::kv_moves(path)) {
    const int32_t from = root + m.from, to = root + m.to;
    for (size_t g = 0; g < kv_specs_.size(); ++g) {
      const std::vector<int32_t>& table = seq.block_tables[g];
      const int32_t from_block = table[size_t(from / bs)], to_block = table[size_t(to / bs)];
      if (from_block < 0 || to_block < 0) continue;  // a window released it: nothing reads it again
      kv_moves_from_[g].push_back(from_block * bs + from % bs);
      kv_moves_to_[g].push_back(to_block * bs + to % bs);
    }
  }
}

void EngineImpl::commit_kv_moves() {
  // The moves are queued before the next step's writes, so blocks the rollback freed still hold their KV.
  std::vector<model::KvRowMoves> groups(kv_specs_.size());
  bool any = false;
  for (size_t g = 0; g < kv_moves_from_.size(); ++g) {
    const auto n = int64_t(kv_moves_from_[g].size());
    if (n == 0) continue;
    DRIFT_CHECK(g < kv_move_from_.size() && n <= kv_move_from_[g].view.numel(), "{} KV moves in group {}", n, g);
    groups[g] = {kv_move_from_[g].view.slice(0, n), kv_move_to_[g].view.slice(0, n)};
    ops_->copy_from_host(groups[g].from, kv_moves_from_[g].data());
    ops_->copy_from_host(groups[g].to, kv_moves_to_[g].data());
    any = true;
  }
  if (any) model_->move_kv(groups);
  for (auto& v : kv_moves_from_) v.clear();
  for (auto& v : kv_moves_to_) v.clear();
}

void EngineImpl::draft_after_step() {
  const Status drafted = drafter_->observe(draft_inputs_);
  draft_inputs_.clear();
  if (drafted.ok()) return;
  // Drafting is an optimisation: a failed round costs this round's trees, not the requests.
  spdlog::warn("drift: EAGLE-3 drafting failed, continuing without drafts this step: {}", drafted.message());
  drafter_->clear_trees();
}

}  // namespace drift::engine
