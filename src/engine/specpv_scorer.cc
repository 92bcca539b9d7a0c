#include "engine/specpv_scorer.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace drift::engine {

SpecPvScorer::SpecPvScorer(backend::Ops& ops, backend::BlockScore form, std::vector<core::KvSpec> kv_specs,
                           int32_t block_size)
    : ops_(ops), form_(form), kv_specs_(std::move(kv_specs)), block_size_(block_size) {}

std::vector<size_t> SpecPvScorer::pack_group(const core::BatchPlan& plan, std::span<const size_t> tracked, size_t g,
                                             std::vector<int32_t>& words) const {
  std::vector<size_t> offsets{words.size()};
  for (size_t k : tracked) {  // entries: (block, tokens) of each block written since the last scored step
    const core::ScheduledSeq& s = plan.seqs[k];
    const int32_t end = s.num_computed + s.num_new;
    // Keys before both the last scored step's start and this step's are as they were then (a refresh may
    // rewind this step below the last one's start, to compute its tokens again).
    const auto stable = stable_tokens_.find(s.seq_id);
    const int32_t first_dirty = stable == stable_tokens_.end() ? 0 : std::min(stable->second, s.num_computed) / block_size_;
    for (int32_t b = first_dirty; b < core::blocks_for_tokens(end, block_size_); ++b)
      words.insert(words.end(), {s.seq->block_tables[g][size_t(b)], std::min(block_size_, end - b * block_size_)});
  }
  offsets.push_back(words.size());
  int32_t row = 0;
  for (size_t k = 0, t = 0; k < plan.seqs.size() && t < tracked.size(); ++k) {  // rows: each segment's
    if (tracked[t] == k) {
      words.insert(words.end(), {row, row + plan.seqs[k].num_new});
      ++t;
    }
    row += plan.seqs[k].num_new;
  }
  offsets.push_back(words.size());
  for (size_t i = 0; i < tracked.size(); ++i) {  // blocks: each segment's table, -1 past its end
    const std::vector<int32_t>& table = plan.seqs[tracked[i]].seq->block_tables[g];
    for (int32_t b = 0; b < width_; ++b) words.push_back(b < step_[i].num_blocks ? table[size_t(b)] : -1);
  }
  offsets.push_back(words.size());
  return offsets;
}

void SpecPvScorer::begin_step(const core::BatchPlan& plan, std::span<const size_t> tracked) {
  collect();
  step_.clear();
  layer_ = 0;
  width_ = 0;
  for (size_t k : tracked) {
    const core::ScheduledSeq& s = plan.seqs[k];
    step_.push_back({.seq_id = s.seq_id, .num_blocks = core::blocks_for_tokens(s.num_computed + s.num_new, block_size_)});
    width_ = std::max(width_, step_.back().num_blocks);
  }
  if (step_.empty()) return;
  std::vector<int32_t> words;
  std::vector<std::vector<size_t>> offsets(kv_specs_.size());
  for (size_t g = 0; g < kv_specs_.size(); ++g)
    if (kv_specs_[g].sliding_window == 0) offsets[g] = pack_group(plan, tracked, g, words);
  upload(words, offsets);
  for (size_t k : tracked) stable_tokens_[plan.seqs[k].seq_id] = plan.seqs[k].num_computed;
}

// The step's inputs to the device in one copy, and its scores set to -inf.
void SpecPvScorer::upload(std::span<const int32_t> words, const std::vector<std::vector<size_t>>& offsets) {
  if (!inputs_device_.view.defined() || inputs_device_.view.numel() < int64_t(words.size()))
    inputs_device_ = ops_.alloc(DType::kI32, {int64_t(words.size()) * 2});
  ops_.copy_from_host(inputs_device_.view.slice(0, int64_t(words.size())), words.data());
  const int64_t segments = int64_t(step_.size());
  inputs_.assign(kv_specs_.size(), {});
  for (size_t g = 0; g < kv_specs_.size(); ++g) {
    if (offsets[g].empty()) continue;
    auto part = [&](size_t i) { return inputs_device_.view.slice(int64_t(offsets[g][i]), int64_t(offsets[g][i + 1])); };
    inputs_[g] = {.entries = part(0).view({int64_t(offsets[g][1] - offsets[g][0]) / 2, 2}),
                  .rows = part(1).view({segments, 2}),
                  .blocks = part(2).view({segments, width_})};
  }
  const int64_t n = segments * width_;
  if (!scores_device_.view.defined() || scores_device_.view.numel() < n)
    scores_device_ = ops_.alloc(DType::kF32, {n * 2});
  host_scores_.assign(size_t(n), -std::numeric_limits<float>::infinity());
  ops_.copy_from_host(scores_device_.view.slice(0, n), host_scores_.data());
  pending_ = true;
}

void SpecPvScorer::on_queries(int32_t kv_group, const Tensor& q, int64_t q_row_stride, const Tensor& k_cache) {
  const size_t layer = size_t(layer_++);
  // A sliding group reads its whole (windowed) table: no view, nothing to score.
  if (step_.empty() || kv_specs_[size_t(kv_group)].sliding_window != 0) return;
  if (layers_.size() <= layer) layers_.resize(layer + 1);
  LayerBounds& b = layers_[layer];
  if (!b.key_min.view.defined()) {
    b.key_min = ops_.alloc(k_cache.dtype, {k_cache.size(0), k_cache.size(2), k_cache.size(3)});
    b.key_max = ops_.alloc(k_cache.dtype, {k_cache.size(0), k_cache.size(2), k_cache.size(3)});
  }
  const GroupInputs& in = inputs_[size_t(kv_group)];
  if (in.entries.size(0) > 0)
    ops_.key_bounds({.k_cache = k_cache, .key_min = b.key_min.view, .key_max = b.key_max.view, .entries = in.entries});
  ops_.score_blocks({.key_min = b.key_min.view, .key_max = b.key_max.view, .q = q, .q_row_stride = q_row_stride,
                     .rows = in.rows, .blocks = in.blocks,
                     .scores = scores_device_.view.slice(0, int64_t(step_.size()) * width_), .form = form_});
}

void SpecPvScorer::collect() {
  if (!pending_) return;
  pending_ = false;
  host_scores_.resize(step_.size() * size_t(width_));
  ops_.copy_to_host(host_scores_.data(), scores_device_.view.slice(0, int64_t(host_scores_.size())));
  for (size_t i = 0; i < step_.size(); ++i) {
    if (step_[i].seq_id < 0) continue;  // forgotten since
    const float* row = host_scores_.data() + i * size_t(width_);
    scores_[step_[i].seq_id].assign(row, row + step_[i].num_blocks);
  }
}

std::span<const float> SpecPvScorer::scores(int64_t seq_id) {
  collect();
  const auto it = scores_.find(seq_id);
  return it == scores_.end() ? std::span<const float>() : std::span<const float>(it->second);
}

void SpecPvScorer::forget(int64_t seq_id) {
  for (Tracked& t : step_)
    if (t.seq_id == seq_id) t.seq_id = -1;
  scores_.erase(seq_id);
  stable_tokens_.erase(seq_id);
}

}  // namespace drift::engine
