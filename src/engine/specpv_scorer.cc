#include "engine/specpv_scorer.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace drift::engine {

SpecPvScorer::SpecPvScorer(spec::BlockScore form, std::vector<core::KvSpec> kv_specs, int32_t block_size)
    : form_(form), kv_specs_(std::move(kv_specs)), block_size_(block_size) {}

void SpecPvScorer::begin_step(const core::BatchPlan& plan, std::span<const size_t> tracked) {
  step_.clear();
  layer_ = 0;
  int64_t row = 0;
  auto next = tracked.begin();
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    const core::ScheduledSeq& s = plan.seqs[k];
    if (next == tracked.end() || *next != k) {
      bounded_.erase(s.seq_id);
      row += s.num_new;
      continue;
    }
    ++next;
    const int32_t end = s.num_computed + s.num_new;
    // A sequence seen before has bounds for its blocks up to the one this step starts writing in.
    const int32_t first_dirty = bounded_[s.seq_id] ? s.num_computed / block_size_ : 0;
    bounded_[s.seq_id] = true;
    scores_[s.seq_id].assign(size_t(core::blocks_for_tokens(end, block_size_)), -std::numeric_limits<float>::infinity());
    step_.push_back({.seq_id = s.seq_id, .seq = s.seq, .first_row = row, .num_rows = s.num_new, .num_tokens = end,
                     .first_dirty = first_dirty});
    row += s.num_new;
  }
}

void SpecPvScorer::on_queries(int32_t kv_group, const Tensor& q, int64_t q_row_stride, const Tensor& k_cache) {
  const size_t layer = size_t(layer_++);
  // A sliding group reads its whole (windowed) table: no view, nothing to score.
  if (step_.empty() || kv_specs_[size_t(kv_group)].sliding_window != 0) return;
  if (layers_.size() <= layer) layers_.resize(layer + 1);
  LayerBounds& b = layers_[layer];
  if (!b.key_min.tensor().defined()) {
    b.key_min = HostTensor(DType::kF32, {k_cache.size(0), k_cache.size(2), k_cache.size(3)});
    b.key_max = HostTensor(DType::kF32, {k_cache.size(0), k_cache.size(2), k_cache.size(3)});
  }
  std::vector<int32_t> blocks, filled;
  for (const Tracked& t : step_) {
    const std::vector<int32_t>& table = t.seq->block_tables[size_t(kv_group)];
    blocks.clear();
    filled.clear();
    for (int32_t i = t.first_dirty; i < core::blocks_for_tokens(t.num_tokens, block_size_); ++i) {
      blocks.push_back(table[size_t(i)]);
      filled.push_back(std::min(block_size_, t.num_tokens - i * block_size_));
    }
    spec::update_key_bounds(k_cache, {b.key_min, b.key_max}, blocks, filled);
    score_layer(t, kv_group, q, q_row_stride, b);
  }
}

void SpecPvScorer::score_layer(const Tracked& t, int32_t kv_group, const Tensor& q, int64_t q_row_stride,
                               const LayerBounds& b) {
  DRIFT_CHECK(q.dtype == DType::kF32, "SpecPV scoring reads fp32 queries (the cpu backend's), got {}", q.describe());
  const int64_t heads = q.size(1), dim = q.size(2), row = heads * dim;
  const int64_t stride = q_row_stride != 0 ? q_row_stride : row;
  q_.resize(size_t(t.num_rows * row));
  for (int32_t i = 0; i < t.num_rows; ++i)
    std::copy_n(q.data_as<float>() + (t.first_row + i) * stride, row, q_.data() + i * row);
  std::vector<float>& scores = scores_[t.seq_id];
  const std::vector<int32_t>& table = t.seq->block_tables[size_t(kv_group)];
  spec::score_blocks({.bounds = {b.key_min, b.key_max},
                      .q = Tensor(q_.data(), DType::kF32, {t.num_rows, heads, dim}, q.device),
                      .block_table = std::span<const int32_t>(table).first(scores.size()),
                      .score = form_},
                     scores);
}

std::span<const float> SpecPvScorer::scores(int64_t seq_id) const {
  const auto it = scores_.find(seq_id);
  return it == scores_.end() ? std::span<const float>() : std::span<const float>(it->second);
}

void SpecPvScorer::forget(int64_t seq_id) {
  scores_.erase(seq_id);
  bounded_.erase(seq_id);
}

}  // namespace drift::engine
