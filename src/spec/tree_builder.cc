#include "spec/tree_builder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace drift::spec {

// One pass for the maximum, one for the normaliser and the k best (kept sorted by insertion: k is a
// tree's top-k, a handful, and the vocabulary tens of thousands; a sort of the whole row cost ten times
// more). Backends with a device sampler do this on the device instead (Eagle3Drafter).
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k) {
  const float lowest = -std::numeric_limits<float>::infinity();
  auto value = [&](size_t i) { return std::isnan(logits[i]) ? lowest : logits[i]; };
  float max = lowest;
  for (size_t i = 0; i < logits.size(); ++i) max = std::max(max, value(i));
  const size_t n = std::min(size_t(std::max(k, 0)), logits.size());
  std::vector<std::pair<int32_t, float>> top;  // best first; ties keep the lower index first
  top.reserve(n + 1);
  float sum = 0.0f;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = value(i);
    if (std::isfinite(max)) sum += std::exp(v - max);
    if (n == 0 || (top.size() == n && !(v > top.back().second))) continue;
    auto at = std::find_if(top.begin(), top.end(), [&](const auto& t) { return v > t.second; });
    top.insert(at, {int32_t(i), v});
    if (top.size() > n) top.pop_back();
  }
  const float log_sum = std::isfinite(max) && sum > 0 ? max + std::log(sum) : 0.0f;
  for (auto& t : top) t.second -= log_sum;
  return top;
}

void TreeBuilder::add_children(int32_t parent, const TopRow& row, std::span<const int32_t> draft_to_target,
                               float parent_score, int32_t depth) {
  const size_t n = std::min(row.size(), size_t(std::max(top_k_, 0)));
  for (size_t i = 0; i < n; ++i) {
    const auto [id, logp] = row[i];
    // A row of non-finite logits may rank ids that are not tokens: it proposes nothing, never crashes.
    if (id < 0 || size_t(id) >= draft_to_target.size() || std::isnan(logp)) continue;
    candidates_.push_back({draft_to_target[size_t(id)], parent, depth, parent_score + logp});
  }
}

void TreeBuilder::start(const TopRow& root, std::span<const int32_t> draft_to_target) {
  candidates_.clear();
  expanded_.clear();
  add_children(-1, root, draft_to_target, 0.0f, 1);
  for (int32_t c = 0; c < int32_t(candidates_.size()); ++c) expanded_.push_back(c);
  frontier_size_ = int32_t(candidates_.size());
}

void TreeBuilder::grow(std::span<const TopRow> rows, std::span<const int32_t> draft_to_target) {
  DRIFT_CHECK_EQ(rows.size(), size_t(frontier_size_));
  const auto first_new = int32_t(candidates_.size());
  const size_t frontier_begin = expanded_.size() - size_t(frontier_size_);
  for (int32_t f = 0; f < frontier_size_; ++f) {
    const int32_t parent = expanded_[frontier_begin + size_t(f)];
    const Candidate p = candidates_[size_t(parent)];
    add_children(parent, rows[size_t(f)], draft_to_target, p.score, p.depth + 1);
  }
  std::vector<int32_t> children(candidates_.size() - size_t(first_new));
  std::iota(children.begin(), children.end(), first_new);
  const size_t keep = std::min(size_t(top_k_), children.size());
  std::partial_sort(children.begin(), children.begin() + ptrdiff_t(keep), children.end(), [&](int32_t a, int32_t b) {
    return candidates_[size_t(a)].score > candidates_[size_t(b)].score ||
           (candidates_[size_t(a)].score == candidates_[size_t(b)].score && a < b);
  });
  expanded_.insert(expanded_.end(), children.begin(), children.begin() + ptrdiff_t(keep));
  frontier_size_ = int32_t(keep);
}

core::DraftTree TreeBuilder::build() const {
  std::vector<int32_t> order(candidates_.size());
  std::iota(order.begin(), order.end(), 0);
  // Best first; a child never scores above its parent, and on a tie the shallower comes first, so every
  // candidate's parent is considered before it.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Candidate &x = candidates_[size_t(a)], &y = candidates_[size_t(b)];
    if (x.score != y.score) return x.score > y.score;
    return x.depth != y.depth ? x.depth < y.depth : a < b;
  });
  std::vector<char> chosen(candidates_.size(), 0);
  int32_t count = 0;
  for (int32_t c : order) {
    if (count == num_tokens_) break;
    const int32_t parent = candidates_[size_t(c)].parent;
    if (parent >= 0 && !chosen[size_t(parent)]) continue;
    chosen[size_t(c)] = 1;
    ++count;
  }
  std::vector<int32_t> nodes;
  for (int32_t c = 0; c < int32_t(candidates_.size()); ++c)
    if (chosen[size_t(c)]) nodes.push_back(c);
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&](int32_t a, int32_t b) { return candidates_[size_t(a)].depth < candidates_[size_t(b)].depth; });
  std::vector<int32_t> node_of(candidates_.size(), -1);
  core::DraftTree tree;
  for (int32_t c : nodes) {
    const Candidate& x = candidates_[size_t(c)];
    node_of[size_t(c)] = tree.size();
    tree.tokens.push_back(x.token);
    tree.parents.push_back(x.parent < 0 ? -1 : node_of[size_t(x.parent)]);
  }
  return tree;
}

}  // namespace drift::spec
