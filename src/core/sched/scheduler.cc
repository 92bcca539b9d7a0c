#include "core/sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"

namespace drift::core {
namespace {

int32_t div_ceil(int64_t a, int32_t b) { return static_cast<int32_t>((a + b - 1) / b); }

std::vector<int32_t> windows_of(const KvConfig& kv) {
  std::vector<int32_t> windows;
  for (const KvSpec& spec : kv.groups) windows.push_back(spec.sliding_window);
  return windows;
}

}  // namespace

bool Scheduler::WaitOrder::operator()(const Sequence* a, const Sequence* b) const {
  if (a->priority != b->priority) return a->priority < b->priority;
  bool a_resumes = a->status == SeqStatus::kPreempted;
  bool b_resumes = b->status == SeqStatus::kPreempted;
  if (a_resumes != b_resumes) return a_resumes;
  if (policy == SchedulePolicy::kSmallFirst && a->num_tokens() != b->num_tokens()) {
    return a->num_tokens() < b->num_tokens();
  }
  return a->arrival < b->arrival;
}

bool Scheduler::AgeOrder::operator()(const Sequence* a, const Sequence* b) const {
  if (a->waiting_since_step != b->waiting_since_step) return a->waiting_since_step < b->waiting_since_step;
  return a->arrival < b->arrival;
}

Expected<std::unique_ptr<Scheduler>> Scheduler::create(const SchedulerConfig& config, const KvConfig& kv) {
  DRIFT_RETURN_IF_ERROR(config.validate());
  DRIFT_RETURN_IF_ERROR(kv.validate());
  return std::make_unique<Scheduler>(config, kv);
}

Scheduler::Scheduler(const SchedulerConfig& config, const KvConfig& kv)
    : config_(config),
      kv_(kv),
      windows_(windows_of(kv)),
      has_window_(std::any_of(windows_.begin(), windows_.end(), [](int32_t w) { return w > 0; })),
      prefix_(kv.block_size, kv.num_blocks, windows_of(kv)),
      waiting_(WaitOrder{config.policy}) {
  token_budget_ = config.max_num_batched_tokens;
  Status config_ok = config.validate();
  DRIFT_CHECK(config_ok.ok(), "{}", config_ok.message());
  Status kv_ok = kv.validate();
  DRIFT_CHECK(kv_ok.ok(), "{}", kv_ok.message());
  pools_.reserve(kv.groups.size());
  for (size_t g = 0; g < kv.groups.size(); ++g) pools_.emplace_back(kv.num_blocks, kv.block_size);
}

int32_t Scheduler::max_length(const Sequence& seq) const {
  return static_cast<int32_t>(std::min<int64_t>(int64_t{seq.num_prompt_tokens} + seq.max_tokens, config_.max_model_len));
}

int32_t Scheduler::reserved_blocks(const Sequence& seq) const { return div_ceil(max_length(seq), kv_.block_size); }

Status Scheduler::add(Sequence seq) {
  auto reject = [&](Status status) {
    ++metrics_.rejected;
    return status;
  };
  if (seqs_.contains(seq.seq_id)) return reject(invalid_argument(fmt::format("request {} already exists", seq.seq_id)));
  if (seq.tokens.empty()) return reject(invalid_argument(fmt::format("request {} has an empty prompt", seq.seq_id)));
  if (seq.max_tokens < 1) {
    return reject(invalid_argument(fmt::format("request {}: max_tokens must be >= 1, got {}", seq.seq_id, seq.max_tokens)));
  }
  int32_t prompt = seq.num_tokens();
  if (prompt >= config_.max_model_len) {
    return reject(invalid_argument(fmt::format("request {}: prompt has {} tokens; max_model_len {} leaves no room for output",
                                               seq.seq_id, prompt, config_.max_model_len)));
  }
  if (!config_.enable_chunked_prefill && prompt > config_.max_num_batched_tokens) {
    return reject(invalid_argument(fmt::format(
        "request {}: prompt has {} tokens, more than max_num_batched_tokens {}, and chunked prefill is off", seq.seq_id,
        prompt, config_.max_num_batched_tokens)));
  }
  seq.num_prompt_tokens = prompt;
  int32_t needed = reserved_blocks(seq);
  if (needed > kv_.num_blocks) {
    return reject(resource_exhausted(fmt::format(
        "request {} can never fit: it needs {} KV blocks ({} tokens = min({} prompt + {} max_tokens, max_model_len {}), "
        "{} tokens per block) but the KV cache has {} blocks ({} tokens) per layer group; lower max_tokens or give the "
        "KV cache more memory",
        seq.seq_id, needed, max_length(seq), prompt, seq.max_tokens, config_.max_model_len, kv_.block_size,
        kv_.num_blocks, int64_t{kv_.num_blocks} * kv_.block_size)));
  }

  auto owned = std::make_unique<Sequence>();
  Sequence& s = *owned;
  s.seq_id = seq.seq_id;
  s.tokens = std::move(seq.tokens);
  s.max_tokens = seq.max_tokens;
  s.priority = seq.priority;
  s.cache_namespace = std::move(seq.cache_namespace);
  s.num_prompt_tokens = prompt;
  s.arrival = next_arrival_++;
  s.block_tables.assign(pools_.size(), {});
  if (config_.enable_prefix_cache) {
    s.cache_namespace_id = prefix_.intern_namespace(s.cache_namespace);
    prefix_.hash_blocks(s);
  }
  s.waiting_since_step = step_;
  enqueue_waiting(s);
  seqs_.emplace(s.seq_id, std::move(owned));
  return Status::Ok();
}

void Scheduler::set_token_budget(int32_t tokens) {
  token_budget_ = std::clamp(tokens, 1, config_.max_num_batched_tokens);
}

Status Scheduler::abort(SeqId id) {
  Sequence* seq = find_mutable(id);
  if (seq == nullptr) return not_found(fmt::format("abort: no request {}", id));
  if (seq->leaving()) return not_found(fmt::format("abort: request {} already finished", id));
  seq->abort_requested = true;
  releasing_.push_back(seq);
  return Status::Ok();
}

Status Scheduler::finish(SeqId id, FinishReason reason) {
  Sequence* seq = find_mutable(id);
  if (seq == nullptr) return not_found(fmt::format("finish: no request {}", id));
  if (seq->abort_requested) return cancelled(fmt::format("finish: request {} was aborted", id));
  if (seq->leaving()) {
    return invalid_argument(fmt::format("finish: request {} already finished ({})", id, finish_reason_name(seq->finish_reason)));
  }
  if (reason != FinishReason::kStop && reason != FinishReason::kLength) {
    return invalid_argument(fmt::format("finish: request {}: reason must be stop or length, got {}", id, finish_reason_name(reason)));
  }
  DRIFT_CHECK(!step_open_, "finish() between commit() and on_step_done()");
  seq->finish_reason = reason;
  releasing_.push_back(seq);
  ++version_;
  return Status::Ok();
}

void Scheduler::append_token(SeqId id, int32_t token) {
  Sequence* seq = find_mutable(id);
  DRIFT_CHECK(seq != nullptr, "append_token: no request {}", id);
  DRIFT_CHECK(seq->status == SeqStatus::kRunning && seq->finish_reason == FinishReason::kNone,
              "append_token: request {} is {} ({})", id, seq_status_name(seq->status), finish_reason_name(seq->finish_reason));
  DRIFT_CHECK(!step_open_, "append_token() between commit() and on_step_done()");
  DRIFT_CHECK_LT(seq->num_tokens(), max_length(*seq));
  seq->tokens.push_back(token);
  ++version_;
}

void Scheduler::append_draft_tokens(SeqId id, std::span<const int32_t> drafts) {
  for (int32_t token : drafts) append_token(id, token);
  find_mutable(id)->num_draft_tokens += static_cast<int32_t>(drafts.size());
}

Status Scheduler::rollback(SeqId id, int32_t new_num_computed, int32_t new_num_tokens) {
  Sequence* seq = find_mutable(id);
  if (seq == nullptr) return not_found(fmt::format("rollback: no request {}", id));
  if (seq->status != SeqStatus::kRunning || seq->leaving()) {
    return invalid_argument(fmt::format("rollback: request {} is not running", id));
  }
  if (step_open_) return invalid_argument("rollback: call it after on_step_done()");
  int32_t verified = seq->num_tokens() - seq->num_draft_tokens;
  if (new_num_tokens < verified || new_num_tokens > seq->num_tokens()) {
    return invalid_argument(fmt::format("rollback: request {}: new_num_tokens {} must lie in [{}, {}]: only draft tokens roll back",
                                        id, new_num_tokens, verified, seq->num_tokens()));
  }
  int32_t lowest = std::min(seq->num_computed, verified);
  int32_t highest = std::min(seq->num_computed, new_num_tokens);
  if (new_num_computed < lowest || new_num_computed > highest) {
    return invalid_argument(fmt::format("rollback: request {}: new_num_computed {} must lie in [{}, {}]", id,
                                        new_num_computed, lowest, highest));
  }
  int32_t bs = kv_.block_size;
  // Blocks holding a draft were never published, so nobody else holds the blocks freed or rewritten here.
  DRIFT_CHECK_LE(static_cast<int32_t>(seq->block_entries.size()), new_num_computed / bs);
  int32_t keep = div_ceil(new_num_computed, bs);
  int32_t num_dropped = std::max(0, seq->num_logical_blocks() - keep);
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = seq->block_tables[g];
    for (auto i = static_cast<int32_t>(table.size()) - 1; i >= keep; --i) {
      if (table[i] == kNoBlock) continue;
      DRIFT_CHECK_EQ(pools_[g].refcount(table[i]), 1);
      free_block(g, table[i]);
    }
    if (static_cast<int32_t>(table.size()) > keep) table.resize(keep);
  }
  if (seq->num_reserved_blocks > 0) outstanding_blocks_ += num_dropped;
  seq->tokens.resize(new_num_tokens);
  seq->num_computed = new_num_computed;
  seq->num_draft_tokens = 0;  // the drafts that are left were accepted
  if (seq->block_hashes.size() > size_t(new_num_tokens / bs)) seq->block_hashes.resize(new_num_tokens / bs);
  ++version_;
  return Status::Ok();
}

const Sequence* Scheduler::find(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

Sequence* Scheduler::find_mutable(SeqId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::enqueue_waiting(Sequence& seq) {
  waiting_.insert(&seq);
  waiting_by_age_.insert(&seq);
}

void Scheduler::dequeue_waiting(Sequence& seq) {
  waiting_.erase(&seq);
  waiting_by_age_.erase(&seq);
}

void Scheduler::free_block(int32_t group, int32_t block) {
  bool keep = config_.enable_prefix_cache && prefix_.is_cached(group, block);
  pools_[group].free(block, keep);
}

int32_t Scheduler::allocate_block(int32_t group) {
  int32_t block = pools_[group].allocate();
  if (config_.enable_prefix_cache) prefix_.on_block_reused(group, block);
  return block;
}

void Scheduler::release_blocks(Sequence& seq) {
  if (seq.num_reserved_blocks > 0) {
    outstanding_blocks_ -= seq.num_reserved_blocks - seq.num_logical_blocks();
    seq.num_reserved_blocks = 0;
  }
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = seq.block_tables[g];
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it != kNoBlock) free_block(g, *it);
    }
    table.clear();
  }
  seq.block_entries.clear();
}

Status Scheduler::check_invariants() const {
  for (int32_t g = 0; g < num_groups(); ++g) {
    Status pool_ok = pools_[g].check_invariants();
    if (!pool_ok.ok()) return internal_error(fmt::format("group {}: {}", g, pool_ok.message()));
  }
  if (config_.enable_prefix_cache) DRIFT_RETURN_IF_ERROR(prefix_.check_invariants());

  std::vector<std::vector<int32_t>> refs(pools_.size(), std::vector<int32_t>(kv_.num_blocks, 0));
  int64_t outstanding = 0;
  for (const auto& [id, owned] : seqs_) {
    const Sequence& s = *owned;
    if (s.num_computed > s.num_tokens()) {
      return internal_error(fmt::format("request {}: num_computed {} > {} tokens", id, s.num_computed, s.num_tokens()));
    }
    if (s.status != SeqStatus::kRunning && s.num_logical_blocks() != 0) {
      return internal_error(fmt::format("request {} is {} but holds {} blocks", id, seq_status_name(s.status), s.num_logical_blocks()));
    }
    if (s.status == SeqStatus::kRunning && s.num_logical_blocks() < div_ceil(s.num_computed, kv_.block_size)) {
      return internal_error(fmt::format("request {}: {} computed tokens in {} blocks", id, s.num_computed, s.num_logical_blocks()));
    }
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (static_cast<int32_t>(s.block_tables[g].size()) != s.num_logical_blocks()) {
        return internal_error(fmt::format("request {}: block tables of different lengths", id));
      }
      for (int32_t block : s.block_tables[g]) {
        if (block != kNoBlock) ++refs[g][block];
      }
    }
    if (s.num_reserved_blocks > 0) {
      if (s.num_reserved_blocks < s.num_logical_blocks()) {
        return internal_error(fmt::format("request {} holds {} blocks, reserved {}", id, s.num_logical_blocks(), s.num_reserved_blocks));
      }
      outstanding += s.num_reserved_blocks - s.num_logical_blocks();
    }
  }
  for (int32_t g = 0; g < num_groups(); ++g) {
    for (int32_t block = 0; block < kv_.num_blocks; ++block) {
      if (refs[g][block] != pools_[g].refcount(block)) {
        return internal_error(fmt::format("group {} block {}: refcount {} but {} table entries", g, block,
                                          pools_[g].refcount(block), refs[g][block]));
      }
    }
  }
  if (outstanding != outstanding_blocks_) {
    return internal_error(fmt::format("outstanding reservations {} but the counter says {}", outstanding, outstanding_blocks_));
  }
  if (config_.admission == AdmissionPolicy::kGuaranteed) {
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (pools_[g].num_free() < outstanding) {
        return internal_error(fmt::format("group {}: {} free blocks cannot cover {} reserved", g, pools_[g].num_free(), outstanding));
      }
    }
  }
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
