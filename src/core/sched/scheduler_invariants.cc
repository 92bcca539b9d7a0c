// Scheduler::check_invariants(): recomputes from the requests' block tables what the pools and the
// reservation counters should say, so tests can compare them after any step.
#include <fmt/format.h>

#include "core/sched/scheduler.h"

namespace drift::core {

Status Scheduler::check_invariants() const {
  for (int32_t g = 0; g < num_groups(); ++g) {
    Status pool_ok = pools_[g].check_invariants();
    if (!pool_ok.ok()) return internal_error(fmt::format("group {}: {}", g, pool_ok.message()));
  }
  if (config_.enable_prefix_cache) DRIFT_RETURN_IF_ERROR(prefix_.check_invariants());
  DRIFT_RETURN_IF_ERROR(check_tables());
  DRIFT_RETURN_IF_ERROR(check_reservations());
  return check_queues();
}

Status Scheduler::check_tables() const {
  std::vector<std::vector<int32_t>> refs;  // [group][block] table entries naming the block
  for (const BlockPool& pool : pools_) refs.emplace_back(pool.num_blocks(), 0);
  for (const auto& [id, owned] : seqs_) {
    const Sequence& s = *owned;
    if (s.num_computed > s.num_tokens()) {
      return internal_error(fmt::format("request {}: num_computed {} > {} tokens", id, s.num_computed, s.num_tokens()));
    }
    if (!s.draft_parents.empty() && static_cast<int32_t>(s.draft_parents.size()) != s.num_draft_tokens) {
      return internal_error(fmt::format("request {}: a draft tree of {} parents for {} drafts", id, s.draft_parents.size(),
                                        s.num_draft_tokens));
    }
    if (s.status != SeqStatus::kRunning && s.num_logical_blocks() != 0) {
      return internal_error(fmt::format("request {} is {} but holds {} blocks", id, seq_status_name(s.status), s.num_logical_blocks()));
    }
    if (s.status == SeqStatus::kRunning && s.num_logical_blocks() < blocks_for_tokens(s.num_computed, kv_.block_size)) {
      return internal_error(fmt::format("request {}: {} computed tokens in {} blocks", id, s.num_computed, s.num_logical_blocks()));
    }
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (static_cast<int32_t>(s.block_tables[g].size()) != s.num_logical_blocks()) {
        return internal_error(fmt::format("request {}: block tables of different lengths", id));
      }
      int32_t held = 0;
      for (int32_t block : s.block_tables[g]) {
        if (block == kNoBlock) continue;
        ++refs[g][block];
        ++held;
      }
      if (held > claim(g, s)) {
        return internal_error(fmt::format("request {} holds {} blocks of group '{}', more than its claim of {}", id,
                                          held, kv_.groups[g].name, claim(g, s)));
      }
    }
  }
  for (int32_t g = 0; g < num_groups(); ++g) {
    for (int32_t block = 0; block < pools_[g].num_blocks(); ++block) {
      if (refs[g][block] != pools_[g].refcount(block)) {
        return internal_error(fmt::format("group {} block {}: refcount {} but {} table entries", g, block,
                                          pools_[g].refcount(block), refs[g][block]));
      }
    }
  }
  return Status::Ok();
}

Status Scheduler::check_reservations() const {
  std::vector<int64_t> reserved(pools_.size(), 0);
  for (const auto& [id, owned] : seqs_) {
    const Sequence& s = *owned;
    if (s.num_reserved_blocks > 0 && s.num_reserved_blocks < s.num_logical_blocks()) {
      return internal_error(fmt::format("request {} holds {} blocks, reserved {}", id, s.num_logical_blocks(), s.num_reserved_blocks));
    }
    count_reservation(reserved, s, s.num_logical_blocks(), +1);
  }
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (reserved[g] != reserved_[g]) {
      return internal_error(fmt::format("group {}: reservations hold back {} blocks but the counter says {}", g,
                                        reserved[g], reserved_[g]));
    }
    if (config_.admission == AdmissionPolicy::kGuaranteed && checks_reservations_[g] &&
        headroom(g, pools_[g].num_free(), reserved[g]) < 0) {
      return internal_error(fmt::format("group {}: {} free of {} blocks cannot cover {} reserved", g,
                                        pools_[g].num_free(), pools_[g].num_blocks(), reserved[g]));
    }
  }
  return Status::Ok();
}

Status Scheduler::check_queues() const {
  size_t num_waiting = 0;
  for (const auto& [id, owned] : seqs_) {
    SeqStatus st = owned->status;
    if (st == SeqStatus::kWaiting || st == SeqStatus::kPreempted) {
      ++num_waiting;
      if (!waiting_.contains(owned.get())) return internal_error(fmt::format("request {} is {} but not queued", id, seq_status_name(st)));
    }
  }
  if (num_waiting != waiting_.size() || num_waiting != waiting_by_age_.size()) {
    return internal_error(fmt::format("{} waiting requests, queues hold {} and {}", num_waiting, waiting_.size(), waiting_by_age_.size()));
  }
  return Status::Ok();
}

}  // namespace drift::core
