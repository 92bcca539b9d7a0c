#include "runner/model_runner.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <functional>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "base/check.h"

namespace drift::runner {

namespace {

int32_t mask_words_for(int32_t num_new) { return (num_new + 31) / 32; }

// Word w of a chain token's mask row: token i sees every new token j <= i.
uint32_t chain_bits(int32_t i, int32_t w) {
  const int32_t below = std::clamp(i + 1 - 32 * w, 0, 32);
  return below == 32 ? ~0u : (1u << below) - 1u;
}

// The logits rows a SeqStep asks for, as indices into its new tokens: calls f(i) for each.
template <class F>
void for_each_logit_row(const SeqStep& seq, F&& f) {
  if (!seq.logit_rows.empty()) {
    for (int32_t i : seq.logit_rows) f(i);
  } else if (seq.all_logits) {
    for (int32_t i = 0; i < seq.num_new; ++i) f(i);
  } else if (seq.wants_logits) {
    f(seq.num_new - 1);
  }
}

int32_t count_logit_rows(const SeqStep& seq) {
  int32_t n = 0;
  for_each_logit_row(seq, [&](int32_t) { ++n; });
  return n;
}

// Checks a sequence's draft tree (positions and ancestor bits) against its shape.
Status check_tree(const SeqStep& seq, int32_t s, int32_t max_model_len) {
  if (seq.positions.empty() != seq.tree_mask.empty())
    return invalid_argument(fmt::format("sequence {}: a draft tree needs both positions and a tree mask", s));
  if (seq.positions.empty()) return Status::Ok();
  const int32_t words = mask_words_for(seq.num_new);
  if (seq.num_new > ModelRunner::kMaxTreeTokens)
    return invalid_argument(
        fmt::format("sequence {}: a draft tree of {} tokens (at most {})", s, seq.num_new, ModelRunner::kMaxTreeTokens));
  if (int32_t(seq.positions.size()) != seq.num_new || int64_t(seq.tree_mask.size()) != int64_t(seq.num_new) * words)
    return invalid_argument(fmt::format("sequence {}: {} new tokens need {} positions and {} mask words, got {} and {}", s,
                                        seq.num_new, seq.num_new, seq.num_new * words, seq.positions.size(),
                                        seq.tree_mask.size()));
  for (int32_t i = 0; i < seq.num_new; ++i) {
    const int32_t pos = seq.positions[size_t(i)];
    if (pos < 0 || pos >= max_model_len)
      return invalid_argument(fmt::format("sequence {}: tree position {} outside [0, {})", s, pos, max_model_len));
    if (((seq.tree_mask[size_t(i) * size_t(words) + size_t(i / 32)] >> (i % 32)) & 1u) == 0)
      return invalid_argument(fmt::format("sequence {}: tree mask row {} does not mark the token itself", s, i));
  }
  return Status::Ok();
}

// A sequence's views: one per KV group, each ascending within its table and ending at the block of its
// last token, so the new tokens see themselves.
Status check_views(const SeqStep& seq, int32_t s, int32_t block_size) {
  if (seq.views.empty()) return Status::Ok();
  if (seq.views.size() != seq.block_tables.size())
    return invalid_argument(fmt::format("sequence {} has {} views for {} KV groups", s, seq.views.size(),
                                        seq.block_tables.size()));
  const int32_t last = (seq.num_computed + seq.num_new - 1) / block_size;
  for (const core::PartialView& v : seq.views) {
    if (v.size() == 0) continue;
    const auto& pos = v.block_positions;
    const bool ascending = std::adjacent_find(pos.begin(), pos.end(), std::greater_equal<>()) == pos.end();
    if (v.block_positions.size() != v.block_ids.size() || !ascending || v.block_positions.front() < 0 ||
        v.block_positions.back() != last)
      return invalid_argument(fmt::format("sequence {}: a view of {} blocks must ascend and end at block {}", s,
                                          v.size(), last));
  }
  return Status::Ok();
}

}  // namespace

// Whether a scheduled step of this sequence computes the whole of its draft tree (the root and every node);
// a chain of drafts needs no tree rows.
bool ModelRunner::verifies_tree(const core::Sequence& seq, int32_t end) {
  return !seq.draft_parents.empty() && end == seq.num_tokens() &&
         seq.num_computed <= seq.num_tokens() - seq.num_draft_tokens - 1;
}

ModelRunner::ModelRunner(model::Model& model, backend::Ops& ops, const RunnerConfig& config,
                         std::unique_ptr<sample::DeviceSampler> sampler)
    : model_(model), ops_(ops), config_(config), sampler_(std::move(sampler)) {
  max_blocks_per_seq_ = (config.max_model_len + config.block_size - 1) / config.block_size;
  max_mask_words_ = mask_words_for(std::min(config.max_num_tokens, kMaxTreeTokens));
  scratch_blocks_ = config.num_blocks;
  const int32_t t = config.max_num_tokens, s = config.max_num_seqs;
  // Decode buckets: powers of two below the largest batch, then the largest batch itself.
  const int32_t largest = std::min(s, t);
  for (int32_t b = 1; b < largest; b *= 2) buckets_.push_back(b);
  buckets_.push_back(largest);
  row_index_.resize(size_t(t));
  std::iota(row_index_.begin(), row_index_.end(), 0);
  const int64_t arena = layout(t, s, t, max_blocks_per_seq_, max_mask_words_, true, s).size;
  staging_ = ops.alloc_host(DType::kI32, {arena});
  staging_read_ = ops.make_mark();
  inputs_ = ops.alloc(DType::kI32, {arena});
  logits_ = ops.alloc(DType::kF32, {t, model.vocab_size()});
  fed_tokens_ = ops.alloc(DType::kI32, {s});
  model.allocate_workspace(t, t);
  std::vector<int32_t> with_scratch = config.num_blocks;
  for (int32_t& n : with_scratch) ++n;
  model.allocate_kv_cache(with_scratch, config.block_size, config.kv_dtype.value_or(ops.compute_dtype()));
}

ModelRunner::Layout ModelRunner::layout(int32_t num_tokens, int32_t num_seqs, int32_t num_logits, int32_t width,
                                        int32_t mask_words, bool views, int32_t num_fed) const {
  Layout l;
  l.num_tokens = num_tokens;
  l.num_seqs = num_seqs;
  l.num_logits = num_logits;
  l.width = width;
  l.mask_words = mask_words;
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t begin = at;
    at += n;
    return begin;
  };
  const int64_t groups = config_.num_kv_groups();
  l.token_ids = take(num_tokens);
  l.positions = take(num_tokens);
  l.context_lens = take(num_seqs);
  l.query_start = take(num_seqs + 1);
  l.logits_rows = take(num_logits);
  l.slot_mapping = take(groups * num_tokens);
  l.block_tables = take(groups * int64_t(num_seqs) * width);
  l.tree_mask = take(int64_t(num_tokens) * mask_words);
  l.views = views;
  l.block_positions = take(views ? groups * int64_t(num_seqs) * width : 0);
  l.view_blocks = take(views ? groups * num_seqs : 0);
  // Last, so that a step's other offsets (which a captured graph holds) do not depend on it.
  l.num_fed = num_fed;
  l.fed_rows = take(num_fed);
  l.fed_from = take(num_fed);
  l.size = at;
  return l;
}

int32_t ModelRunner::decode_bucket(int32_t num_seqs) const {
  for (int32_t b : buckets_)
    if (b >= num_seqs) return b;
  return 0;
}

Expected<ModelRunner::StepShape> ModelRunner::check(std::span<const SeqStep> seqs) const {
  StepShape shape;
  shape.num_seqs = int32_t(seqs.size());
  if (shape.num_seqs == 0 || shape.num_seqs > config_.max_num_seqs)
    return invalid_argument(fmt::format("a step needs 1..{} sequences, got {}", config_.max_num_seqs, shape.num_seqs));
  const size_t num_groups = size_t(config_.num_kv_groups());
  const int32_t bs = config_.block_size;
  int32_t blocks_wide = 1;
  bool uniform = true;
  for (int32_t s = 0; s < shape.num_seqs; ++s) {
    const SeqStep& seq = seqs[size_t(s)];
    const int32_t end = seq.num_computed + seq.num_new;
    if (seq.num_new <= 0 || end > int32_t(seq.tokens.size()) || end > config_.max_model_len)
      return invalid_argument(fmt::format("sequence {} schedules tokens [{}, {}) of {} (max_model_len {})", s,
                                          seq.num_computed, end, seq.tokens.size(), config_.max_model_len));
    const int32_t blocks_needed = (end + bs - 1) / bs;
    if (seq.block_tables.size() != num_groups)
      return invalid_argument(fmt::format("sequence {} has {} block tables for {} KV groups", s, seq.block_tables.size(),
                                          num_groups));
    for (const auto& table : seq.block_tables)
      if (int32_t(table.size()) < blocks_needed || int32_t(table.size()) > max_blocks_per_seq_)
        return invalid_argument(fmt::format("sequence {} needs {} KV blocks for {} tokens, its block table has {} (at most {})",
                                            s, blocks_needed, end, table.size(), max_blocks_per_seq_));
    int32_t previous = -1;
    for (int32_t i : seq.logit_rows) {
      if (i <= previous || i >= seq.num_new)
        return invalid_argument(fmt::format("sequence {}: logit rows must ascend within [0, {}), got {}", s, seq.num_new, i));
      previous = i;
    }
    DRIFT_RETURN_IF_ERROR(check_tree(seq, s, config_.max_model_len));
    DRIFT_RETURN_IF_ERROR(check_views(seq, s, bs));
    shape.views = shape.views || !seq.views.empty();
    if (!seq.tree_mask.empty()) shape.mask_words = std::max(shape.mask_words, mask_words_for(seq.num_new));
    const int32_t logits = count_logit_rows(seq);
    shape.num_tokens += seq.num_new;
    shape.max_new = std::max(shape.max_new, seq.num_new);
    if (shape.num_tokens > config_.max_num_tokens)
      return invalid_argument(fmt::format("step exceeds max_num_tokens {}", config_.max_num_tokens));
    shape.num_logits += logits;
    blocks_wide = std::max(blocks_wide, blocks_needed);
    const SeqStep& first = seqs[0];
    // Longer chains are prompt chunks, whose lengths vary without bound: a graph each would never pay.
    uniform = uniform && logits > 0 && seq.num_new == first.num_new && logits == count_logit_rows(first) &&
              (seq.num_new <= bs || !seq.tree_mask.empty()) && seq.tree_mask.empty() == first.tree_mask.empty();
  }
  if (uniform) {
    shape.uniform_new = seqs[0].num_new;
    shape.uniform_logits = count_logit_rows(seqs[0]);
  }
  // Block tables are passed only as wide as a power of two covering the step, so the upload stays small
  // and a graph serves every step whose longest sequence falls in the same power of two.
  shape.width = std::min(max_blocks_per_seq_,
                         std::max(config_.min_table_width, int32_t(std::bit_ceil(uint32_t(blocks_wide)))));
  return shape;
}

// Block-table columns past a sequence's last needed block are never read, so they are not written.
void ModelRunner::pack(std::span<const SeqStep> seqs, const Layout& l) {
  const size_t num_groups = size_t(config_.num_kv_groups());
  const int32_t bs = config_.block_size;
  int32_t* h = staging_.view.data_as<int32_t>();
  int32_t row = 0, logits_row = 0;
  h[l.query_start] = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqStep& seq = seqs[s];
    const int32_t end = seq.num_computed + seq.num_new;
    const int32_t first_row = row;
    for (int32_t i = 0; i < seq.num_new; ++i, ++row) {
      const int32_t pos = seq.num_computed + i;  // the cache position the token's K/V goes to
      h[l.token_ids + row] = seq.tokens[size_t(pos)];
      h[l.positions + row] = seq.positions.empty() ? pos : seq.positions[size_t(i)];
      for (size_t g = 0; g < num_groups; ++g) {
        const int32_t block = seq.block_tables[g][size_t(pos / bs)];
        h[l.slot_mapping + int64_t(g) * l.num_tokens + row] = block < 0 ? -1 : block * bs + pos % bs;
      }
      // Tree rows copy their ancestor bits; chain rows (and padding words) see every earlier new token.
      uint32_t* mask = reinterpret_cast<uint32_t*>(h + l.tree_mask + int64_t(row) * l.mask_words);
      const int32_t words = mask_words_for(seq.num_new);
      for (int32_t w = 0; w < l.mask_words; ++w) {
        if (!seq.tree_mask.empty()) {
          mask[w] = w < words ? seq.tree_mask[size_t(i) * size_t(words) + size_t(w)] : 0u;
        } else {
          mask[w] = chain_bits(i, w);
        }
      }
    }
    for (size_t g = 0; g < num_groups; ++g)
      std::copy_n(seq.block_tables[g].begin(), (end + bs - 1) / bs,
                  h + l.block_tables + (int64_t(g) * l.num_seqs + int64_t(s)) * l.width);
    if (l.views) pack_views(seq, int32_t(s), l);
    h[l.query_start + int64_t(s) + 1] = row;
    h[l.context_lens + int64_t(s)] = end;
    for_each_logit_row(seq, [&](int32_t i) { h[l.logits_rows + logits_row++] = first_row + i; });
  }
}

// A view step's view rows of sequence s, per group: its view (over the block-table row pack() wrote), or
// the identity over its whole table when it reads all of it.
void ModelRunner::pack_views(const SeqStep& seq, int32_t s, const Layout& l) {
  const int32_t bs = config_.block_size;
  int32_t* h = staging_.view.data_as<int32_t>();
  for (int32_t g = 0; g < config_.num_kv_groups(); ++g) {
    const int64_t row = int64_t(g) * l.num_seqs + s;
    int32_t* table = h + l.block_tables + row * l.width;
    int32_t* positions = h + l.block_positions + row * l.width;
    const core::PartialView* view = seq.views.empty() ? nullptr : &seq.views[size_t(g)];
    if (view != nullptr && view->size() > 0) {
      std::copy(view->block_ids.begin(), view->block_ids.end(), table);
      std::copy(view->block_positions.begin(), view->block_positions.end(), positions);
      h[l.view_blocks + row] = view->size();
    } else {
      const int32_t blocks = (seq.num_computed + seq.num_new + bs - 1) / bs;
      std::iota(positions, positions + blocks, 0);
      h[l.view_blocks + row] = blocks;
    }
  }
}

// Padding sequences of a graph bucket: new_per_seq tokens (token 0) at positions 0.. of a sequence that
// lives in the scratch block, written and read there only (every column of its table is the scratch block,
// so a verify step's longer rows wrap around in it: padding reads garbage, never a real sequence's KV);
// logits of their last rows.
void ModelRunner::pack_padding(int32_t num_real_seqs, int32_t new_per_seq, int32_t logits_per_seq, const Layout& l) {
  const size_t num_groups = size_t(config_.num_kv_groups());
  const int32_t bs = config_.block_size;
  int32_t* h = staging_.view.data_as<int32_t>();
  for (int32_t s = num_real_seqs; s < l.num_seqs; ++s) {
    for (int32_t i = 0; i < new_per_seq; ++i) {
      const int32_t row = s * new_per_seq + i;
      h[l.token_ids + row] = 0;
      h[l.positions + row] = i;
      for (size_t g = 0; g < num_groups; ++g)
        h[l.slot_mapping + int64_t(g) * l.num_tokens + row] = scratch_blocks_[g] * bs + i % bs;
      uint32_t* mask = reinterpret_cast<uint32_t*>(h + l.tree_mask + int64_t(row) * l.mask_words);
      for (int32_t w = 0; w < l.mask_words; ++w) mask[w] = chain_bits(i, w);
    }
    for (int32_t j = 0; j < logits_per_seq; ++j)
      h[l.logits_rows + s * logits_per_seq + j] = (s + 1) * new_per_seq - logits_per_seq + j;
    const int32_t blocks = (new_per_seq + bs - 1) / bs;  // at most l.width: a real sequence computes as many
    for (size_t g = 0; g < num_groups; ++g) {
      const int64_t table_row = int64_t(g) * l.num_seqs + s;
      std::fill_n(h + l.block_tables + table_row * l.width, blocks, scratch_blocks_[g]);
      if (!l.views) continue;
      std::iota(h + l.block_positions + table_row * l.width, h + l.block_positions + table_row * l.width + blocks, 0);
      h[l.view_blocks + table_row] = blocks;
    }
    h[l.query_start + s + 1] = (s + 1) * new_per_seq;
    h[l.context_lens + s] = new_per_seq;
  }
}

Status ModelRunner::check_fed(std::span<const SeqStep> seqs, std::span<const FedToken> fed) const {
  if (fed.empty()) return Status::Ok();
  if (sampler_ == nullptr || last_sampled_rows_ < 0)
    return invalid_argument("fed tokens need an earlier launch_sampling() to come from");
  for (const FedToken& f : fed) {
    if (f.seq < 0 || f.seq >= int32_t(seqs.size()) || f.from_row < 0 || f.from_row >= last_sampled_rows_)
      return invalid_argument(fmt::format("fed token of sequence {} from row {}: the step has {} sequences, the "
                                          "launch before it {} rows", f.seq, f.from_row, seqs.size(), last_sampled_rows_));
    const SeqStep& seq = seqs[size_t(f.seq)];
    if (seq.num_computed + seq.num_new != int32_t(seq.tokens.size()) || !seq.positions.empty())
      return invalid_argument(fmt::format("fed token of sequence {}: only a chain's last token can be fed", f.seq));
  }
  return Status::Ok();
}

void ModelRunner::pack_fed(std::span<const SeqStep> seqs, std::span<const FedToken> fed, const Layout& l) {
  int32_t* h = staging_.view.data_as<int32_t>();
  std::vector<int32_t> first_row(seqs.size() + 1, 0);
  for (size_t s = 0; s < seqs.size(); ++s) first_row[s + 1] = first_row[s] + seqs[s].num_new;
  for (size_t i = 0; i < fed.size(); ++i) {
    h[l.fed_rows + int64_t(i)] = first_row[size_t(fed[i].seq) + 1] - 1;  // the sequence's last new token
    h[l.fed_from + int64_t(i)] = fed[i].from_row;
  }
}

// Gathers the sampled rows, then scatters them over the uploaded token ids: two small kernels, ahead of
// the forward on the same queue, so the previous step's sampling has written them.
void ModelRunner::copy_fed(const Layout& l) {
  if (l.num_fed == 0) return;
  const Tensor all = inputs_.view.slice(0, l.size);
  const Tensor gathered = fed_tokens_.view.slice(0, l.num_fed).view({l.num_fed, 1});
  const Tensor sampled = sampler_->device_tokens();
  ops_.gather_rows(sampled.view({sampled.numel(), 1}), all.slice(l.fed_from, l.fed_from + l.num_fed), gathered);
  ops_.scatter_rows(gathered, all.slice(l.fed_rows, l.fed_rows + l.num_fed),
                    all.slice(l.token_ids, l.token_ids + l.num_tokens).view({l.num_tokens, 1}));
}

model::ForwardContext ModelRunner::context(const Layout& l) const {
  const Tensor all = inputs_.view.slice(0, l.size);
  auto part = [&](int64_t offset, int64_t n) { return all.slice(offset, offset + n); };
  model::ForwardContext ctx;
  ctx.num_tokens = l.num_tokens;
  ctx.num_seqs = l.num_seqs;
  ctx.num_logits = l.num_logits;
  ctx.token_ids = part(l.token_ids, l.num_tokens);
  ctx.positions = part(l.positions, l.num_tokens);
  for (int64_t g = 0; g < config_.num_kv_groups(); ++g) {
    model::KvGroupContext kv{
        .slot_mapping = part(l.slot_mapping + g * l.num_tokens, l.num_tokens),
        .block_tables = part(l.block_tables + g * l.num_seqs * l.width, int64_t(l.num_seqs) * l.width)
                            .view({l.num_seqs, l.width})};
    if (l.views) {
      kv.block_positions = part(l.block_positions + g * l.num_seqs * l.width, int64_t(l.num_seqs) * l.width)
                               .view({l.num_seqs, l.width});
      kv.view_blocks = part(l.view_blocks + g * l.num_seqs, l.num_seqs);
    }
    ctx.kv_groups.push_back(kv);
  }
  ctx.query_start = part(l.query_start, l.num_seqs + 1);
  ctx.context_lens = part(l.context_lens, l.num_seqs);
  ctx.logits_rows = part(l.logits_rows, l.num_logits);
  ctx.query_tap = query_tap_ != nullptr && query_tap_->active() ? query_tap_ : nullptr;
  if (l.mask_words > 0) {
    Tensor mask = part(l.tree_mask, int64_t(l.num_tokens) * l.mask_words).view({l.num_tokens, l.mask_words});
    mask.dtype = DType::kU32;
    ctx.tree_mask = mask;
  }
  return ctx;
}

Expected<int32_t> ModelRunner::forward(std::span<const SeqStep> seqs, bool allow_graph, std::span<const FedToken> fed) {
  DRIFT_ASSIGN_OR_RETURN(const int32_t num_logits, run_forward(seqs, allow_graph, fed));
  DRIFT_RETURN_IF_ERROR(model_.status());
  return num_logits;
}

Expected<int32_t> ModelRunner::run_forward(std::span<const SeqStep> seqs, bool allow_graph,
                                           std::span<const FedToken> fed) {
  DRIFT_ASSIGN_OR_RETURN(const StepShape shape, check(seqs));
  DRIFT_RETURN_IF_ERROR(check_fed(seqs, fed));
  const int32_t num_fed = int32_t(fed.size());
  if (query_tap_ != nullptr && query_tap_->active()) allow_graph = false;  // the tap's host work runs each step
  int32_t bucket = allow_graph && shape.uniform_new > 0 ? decode_bucket(shape.num_seqs) : 0;
  if (int64_t(bucket) * shape.uniform_new > config_.max_num_tokens) bucket = 0;  // the padded step would not fit
  const Layout l = bucket > 0 ? layout(bucket * shape.uniform_new, bucket, bucket * shape.uniform_logits, shape.width,
                                       shape.mask_words, shape.views, num_fed)
                              : layout(shape.num_tokens, shape.num_seqs, shape.num_logits, shape.width, shape.mask_words,
                                       shape.views, num_fed);
  staging_read_->wait();
  pack(seqs, l);
  if (bucket > 0) pack_padding(shape.num_seqs, shape.uniform_new, shape.uniform_logits, l);
  pack_fed(seqs, fed, l);
  ops_.copy_from_host(inputs_.view.slice(0, l.size), staging_.view.data);
  staging_read_->record();
  copy_fed(l);
  model::ForwardContext ctx = context(l);
  ctx.max_query_len = shape.max_new;  // padding sequences have as many as the real ones
  const Tensor logits = logits_.view.slice(0, l.num_logits);
  if (bucket == 0) {
    model_.forward(ctx, logits);
    return shape.num_logits;
  }
  auto& graph = graphs_[{bucket, shape.uniform_new, shape.uniform_logits, shape.width, shape.mask_words, shape.views}];
  if (graph != nullptr) {
    graph->replay();
    ++graph_replays_;
    return shape.num_logits;
  }
  // First time for this shape: run it directly (which also builds any per-shape plans, such as
  // cuBLASLt's, on the host), then record the same launches for the steps to come.
  model_.forward(ctx, logits);
  graph = model_.capture_forward(ops_, ctx, logits);
  return shape.num_logits;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Expected<std::span<const float>> ModelRunner::step(std::span<const SeqStep> seqs) {
  auto t = std::chrono::steady_clock::now();
  DRIFT_ASSIGN_OR_RETURN(const int32_t num_logits, forward(seqs, false));
  step_times_.launch += seconds_since(t);
  t = std::chrono::steady_clock::now();
  const Tensor logits = logits_.view.slice(0, num_logits);
  h_logits_.resize(size_t(num_logits) * size_t(model_.vocab_size()));
  ops_.copy_to_host(h_logits_.data(), logits);
  ops_.synchronize();
  step_times_.wait += seconds_since(t);
  return std::span<const float>(h_logits_);
}

Status ModelRunner::launch_forward(std::span<const SeqStep> seqs, std::span<const FedToken> fed) {
  if (sampler_ == nullptr)
    return unsupported(fmt::format("the {} backend's runner has no device sampler", ops_.name()));
  if (forward_rows_ >= 0) return invalid_argument("launch_forward: the step before was not sampled yet");
  const bool graphs = config_.cuda_graphs && ops_.supports_capture();
  const auto t = std::chrono::steady_clock::now();
  DRIFT_ASSIGN_OR_RETURN(forward_rows_, forward(seqs, graphs, fed));
  step_times_.launch += seconds_since(t);
  return Status::Ok();
}

Status ModelRunner::launch_sampling(std::span<const sample::RowSampling> sampling) {
  if (forward_rows_ < 0) return invalid_argument("launch_sampling: no forward to sample");
  const int32_t rows = std::exchange(forward_rows_, -1);
  if (size_t(rows) != sampling.size())
    return invalid_argument(fmt::format("step_and_sample: the step has {} logits rows but {} samplings were given", rows,
                                        sampling.size()));
  const auto t = std::chrono::steady_clock::now();
  sampler_->launch(logits_.view.slice(0, rows), sampling);
  last_sampled_rows_ = rows;
  step_times_.launch += seconds_since(t);
  return Status::Ok();
}

Expected<std::span<const sample::SampleResult>> ModelRunner::wait_sampled() {
  if (sampler_ == nullptr) return unsupported(fmt::format("the {} backend's runner has no device sampler", ops_.name()));
  const auto t = std::chrono::steady_clock::now();
  std::span<const sample::SampleResult> picked = sampler_->wait();
  step_times_.wait += seconds_since(t);
  return picked;
}

Expected<std::span<const sample::SampleResult>> ModelRunner::step_and_sample(
    std::span<const SeqStep> seqs, std::span<const sample::RowSampling> sampling,
    const std::function<void()>& while_running) {
  DRIFT_RETURN_IF_ERROR(launch_forward(seqs));
  if (while_running) while_running();
  DRIFT_RETURN_IF_ERROR(launch_sampling(sampling));
  return wait_sampled();
}

int32_t ModelRunner::num_logits(const core::ScheduledSeq& s) {
  if (!s.samples) return 0;
  return std::min(s.num_new, 1 + s.seq->num_draft_tokens);
}

std::span<const SeqStep> ModelRunner::rows_of(const core::BatchPlan& plan, PlanViews views) {
  DRIFT_CHECK(views.empty() || views.size() == plan.seqs.size(), "runner: {} views for {} sequences", views.size(),
              plan.seqs.size());
  plan_steps_.clear();
  plan_trees_.clear();
  plan_trees_.reserve(plan.seqs.size());  // steps point into it
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    const core::ScheduledSeq& s = plan.seqs[k];
    const int32_t logits = num_logits(s);
    SeqStep step{.tokens = s.seq->tokens, .num_computed = s.num_computed, .num_new = s.num_new,
                 .block_tables = s.seq->block_tables};
    step.logit_rows = std::span<const int32_t>(row_index_).subspan(size_t(s.num_new - logits), size_t(logits));
    if (!views.empty()) step.views = views[k];
    if (verifies_tree(*s.seq, s.num_computed + s.num_new)) {
      const core::TreeRows& rows = plan_trees_.emplace_back(core::tree_rows(core::drafts_of(*s.seq), s.num_computed, s.num_new));
      step.positions = rows.positions;
      step.tree_mask = rows.mask;
    }
    plan_steps_.push_back(step);
  }
  return plan_steps_;
}

Expected<std::span<const float>> ModelRunner::step(const core::BatchPlan& plan, PlanViews views) {
  return step(rows_of(plan, views));
}

Expected<std::span<const sample::SampleResult>> ModelRunner::step_and_sample(
    const core::BatchPlan& plan, std::span<const sample::RowSampling> sampling,
    const std::function<void()>& while_running, PlanViews views) {
  return step_and_sample(rows_of(plan, views), sampling, while_running);
}

Status ModelRunner::launch_forward(const core::BatchPlan& plan, std::span<const FedToken> fed) {
  return launch_forward(rows_of(plan, {}), fed);
}

}  // namespace drift::runner
