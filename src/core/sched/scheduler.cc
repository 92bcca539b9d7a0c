#include "core/sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"
#include "core/kv/kv_sizing.h"

namespace drift::core {
namespace {

std::vector<int32_t> windows_of(const KvConfig& kv) {
  std::vector<int32_t> windows;
  for (const KvSpec& spec : kv.groups) windows.push_back(spec.sliding_window);
  return windows;
}

std::vector<bool> groups_checking_reservations(const KvConfig& kv) {
  std::vector<bool> checks(kv.groups.size(), true);
  for (size_t g = 0; g < kv.groups.size(); ++g) {
    if (kv.groups[g].sliding_window == 0) continue;
    for (size_t f = 0; f < kv.groups.size(); ++f) {
      if (kv.groups[f].sliding_window == 0 && kv.num_blocks[f] <= kv.num_blocks[g]) checks[g] = false;
    }
  }
  return checks;
}

}  // namespace

bool Scheduler::WaitOrder::operator()(const Sequence* a, const Sequence* b) const {
  if (a->deferred != b->deferred) return b->deferred;
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
  for (size_t g = 0; g < kv.groups.size(); ++g) pools_.emplace_back(kv.num_blocks[g], kv.block_size);
  checks_reservations_ = groups_checking_reservations(kv);
  reserved_.assign(kv.groups.size(), 0);
}

int32_t Scheduler::max_length(const Sequence& seq) const {
  return static_cast<int32_t>(std::min<int64_t>(int64_t{seq.num_prompt_tokens} + seq.max_tokens, config_.max_model_len));
}

int32_t Scheduler::reserved_blocks(const Sequence& seq) const { return blocks_for_tokens(max_length(seq), kv_.block_size); }

int32_t Scheduler::claim(int32_t group, const Sequence& seq) const {
  return max_blocks_held(windows_[group], max_length(seq), config_.max_num_batched_tokens, kv_.block_size);
}

int64_t Scheduler::held_back(int32_t group, const Sequence& seq, int32_t num_logical) const {
  return windows_[group] > 0 ? claim(group, seq) : reserved_blocks(seq) - num_logical;
}

void Scheduler::count_reservation(std::vector<int64_t>& reserved, const Sequence& seq, int32_t num_logical,
                                  int32_t sign) const {
  if (seq.num_reserved_blocks == 0) return;
  for (int32_t g = 0; g < num_groups(); ++g) reserved[g] += sign * held_back(g, seq, num_logical);
}

int64_t Scheduler::headroom(int32_t group, int64_t num_free, int64_t reserved) const {
  return (windows_[group] > 0 ? pools_[group].num_blocks() : num_free) - reserved;
}

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
  if (Status fits = check_fits(seq); !fits.ok()) return reject(std::move(fits));

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

Status Scheduler::check_fits(const Sequence& seq) const {
  for (int32_t g = 0; g < num_groups(); ++g) {
    int32_t needed = claim(g, seq);
    int32_t available = pools_[g].num_blocks();
    if (needed <= available) continue;
    std::string why = fmt::format("{} tokens = min({} prompt + {} max_tokens, max_model_len {})", max_length(seq),
                                  seq.num_prompt_tokens, seq.max_tokens, config_.max_model_len);
    if (windows_[g] > 0) {
      why = fmt::format("its {}-token window plus a step of up to {} tokens, of {}", windows_[g],
                        config_.max_num_batched_tokens, why);
    }
    return resource_exhausted(fmt::format(
        "request {} can never fit: it needs {} KV blocks of group '{}' at once ({}; {} tokens per block) but that "
        "group's pool has {} blocks ({} tokens); lower max_tokens or give the KV cache more memory",
        seq.seq_id, needed, kv_.groups[g].name, why, kv_.block_size, available, int64_t{available} * kv_.block_size));
  }
  return Status::Ok();
}

void Scheduler::set_token_budget(int32_t tokens) {
  token_budget_ = std::clamp(tokens, 1, config_.max_num_batched_tokens);
}

Status Scheduler::defer(SeqId id, bool deferred) {
  Sequence* seq = find_mutable(id);
  if (seq == nullptr || seq->leaving()) return not_found(fmt::format("defer: no waiting request {}", id));
  if (seq->status != SeqStatus::kWaiting) return invalid_argument(fmt::format("defer: request {} has started", id));
  if (seq->deferred == deferred) return Status::Ok();
  // The flag is part of the queue's order: take the request out while it changes.
  dequeue_waiting(*seq);
  seq->deferred = deferred;
  enqueue_waiting(*seq);
  ++version_;
  return Status::Ok();
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

void Scheduler::append_pending_token(SeqId id) {
  const Sequence* seq = find(id);
  DRIFT_CHECK(seq != nullptr && seq->num_pending_tokens == 0 && seq->num_draft_tokens == 0,
              "append_pending_token: request {} holds a pending token or drafts already", id);
  append_token(id, kPendingToken);
  find_mutable(id)->num_pending_tokens = 1;
}

void Scheduler::resolve_pending_token(SeqId id, int32_t token) {
  Sequence* seq = find_mutable(id);
  DRIFT_CHECK(seq != nullptr && seq->num_pending_tokens == 1, "resolve_pending_token: request {} has no pending token", id);
  seq->tokens.back() = token;
  seq->num_pending_tokens = 0;
}

void Scheduler::append_draft_tokens(SeqId id, std::span<const int32_t> drafts) {
  for (int32_t token : drafts) append_token(id, token);
  Sequence* seq = find_mutable(id);
  DRIFT_CHECK(seq->draft_parents.empty(), "append_draft_tokens: request {} already holds a draft tree", id);
  seq->num_draft_tokens += static_cast<int32_t>(drafts.size());
}

void Scheduler::append_draft_tree(SeqId id, const DraftTree& tree) {
  DRIFT_CHECK(check_tree(tree).ok(), "append_draft_tree: {}", check_tree(tree).message());
  const Sequence* seq = find(id);
  DRIFT_CHECK(seq != nullptr && seq->num_draft_tokens == 0, "append_draft_tree: request {} already holds drafts", id);
  append_draft_tokens(id, tree.tokens);
  if (!tree.is_chain()) find_mutable(id)->draft_parents = tree.parents;
}

Status Scheduler::accept_draft_path(SeqId id, std::span<const int32_t> path) {
  Sequence* seq = find_mutable(id);
  if (seq == nullptr) return not_found(fmt::format("accept_draft_path: no request {}", id));
  if (seq->num_computed != seq->num_tokens())
    return invalid_argument(fmt::format("accept_draft_path: request {} has computed {} of its {} tokens: verify the "
                                        "whole tree first", id, seq->num_computed, seq->num_tokens()));
  const int32_t verified = seq->num_tokens() - seq->num_draft_tokens;
  const DraftTree tree = drafts_of(*seq);
  for (size_t k = 0; k < path.size(); ++k) {
    const int32_t node = path[k];
    if (node < 0 || node >= tree.size() || tree.parents[size_t(node)] != (k == 0 ? -1 : path[k - 1]))
      return invalid_argument(fmt::format("accept_draft_path: request {}: node {} at step {} is not a child of the "
                                          "path so far", id, node, k));
  }
  const auto length = static_cast<int32_t>(path.size());
  for (int32_t k = 0; k < length; ++k) seq->tokens[size_t(verified + k)] = tree.tokens[size_t(path[size_t(k)])];
  // Hashes of blocks holding rewritten tokens are stale.
  if (seq->block_hashes.size() > size_t(verified / kv_.block_size)) seq->block_hashes.resize(size_t(verified / kv_.block_size));
  return rollback(id, verified + length, verified + length);
}

Status Scheduler::mark_approximate(SeqId id, int32_t position) {
  Sequence* seq = find_mutable(id);
  if (seq == nullptr) return not_found(fmt::format("mark_approximate: no request {}", id));
  if (seq->status != SeqStatus::kRunning) return invalid_argument(fmt::format("mark_approximate: request {} is not running", id));
  const int32_t published = static_cast<int32_t>(seq->block_entries.size()) * kv_.block_size;
  if (position < published || position > seq->num_tokens())
    return invalid_argument(fmt::format("mark_approximate: request {}: position {} must lie in [{}, {}] (published "
                                        "blocks end at the first)", id, position, published, seq->num_tokens()));
  seq->approximate_from = seq->approximate_from < 0 ? position : std::min(seq->approximate_from, position);
  return Status::Ok();
}

Expected<int32_t> Scheduler::recompute_approximate(SeqId id) {
  Sequence* seq = find_mutable(id);
  if (seq == nullptr) return not_found(fmt::format("recompute_approximate: no request {}", id));
  if (seq->status != SeqStatus::kRunning || seq->leaving())
    return invalid_argument(fmt::format("recompute_approximate: request {} is not running", id));
  if (step_open_) return invalid_argument("recompute_approximate: call it after on_step_done()");
  const int32_t from = seq->approximate_from;
  if (from < 0) return 0;
  if (from >= seq->num_computed) {
    seq->approximate_from = -1;  // nothing computed approximately is left (its drafts were rejected)
    return 0;
  }
  // The first token computed again attends to keys back to from - window + 1: a window group must hold them.
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (windows_[g] <= 0) continue;
    const std::vector<int32_t>& table = seq->block_tables[g];
    int32_t first_held = 0;
    while (first_held < static_cast<int32_t>(table.size()) && table[first_held] == kNoBlock) ++first_held;
    if (first_held > 0 && first_held * kv_.block_size > from - windows_[g] + 1) return 0;
  }
  DRIFT_CHECK_LE(static_cast<int32_t>(seq->block_entries.size()) * kv_.block_size, from);
  const int32_t n = seq->num_computed - from;
  seq->num_computed = from;
  seq->approximate_from = -1;  // nothing past num_computed is published until computed again
  ++version_;
  return n;
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
  int32_t keep = blocks_for_tokens(new_num_computed, bs);
  count_reservation(reserved_, *seq, seq->num_logical_blocks(), -1);
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = seq->block_tables[g];
    for (auto i = static_cast<int32_t>(table.size()) - 1; i >= keep; --i) {
      if (table[i] == kNoBlock) continue;
      DRIFT_CHECK_EQ(pools_[g].refcount(table[i]), 1);
      free_block(g, table[i]);
    }
    if (static_cast<int32_t>(table.size()) > keep) table.resize(keep);
  }
  count_reservation(reserved_, *seq, seq->num_logical_blocks(), +1);
  seq->tokens.resize(new_num_tokens);
  seq->num_computed = new_num_computed;
  seq->num_draft_tokens = 0;  // the drafts that are left were accepted
  seq->draft_parents.clear();
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
  count_reservation(reserved_, seq, seq.num_logical_blocks(), -1);
  seq.num_reserved_blocks = 0;
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = seq.block_tables[g];
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it != kNoBlock) free_block(g, *it);
    }
    table.clear();
  }
  seq.block_entries.clear();
}

}  // namespace drift::core
