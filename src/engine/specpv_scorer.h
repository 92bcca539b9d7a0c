// SpecPvScorer: SpecPV's retrieval scores from the sequences' own queries. It is the runner's query tap
// (model::QueryTap): during a step, each full-attention GQA layer hands it its queries and key cache;
// for each tracked sequence it brings that layer's key bounds (spec/block_bounds.h, the host reference)
// up to date for the blocks the step wrote, then scores the sequence's blocks against the step's
// queries of the sequence, max over layers. A view must be fixed before the layers run, so a verify
// step's view ranks blocks by the queries of the sequence's previous step: the last verified token and
// drafts one step older, whose context is the same but for the tokens accepted since.
//
// Cost: the bounds of a written block are recomputed whole (one read of its keys per layer), and every
// step of a tracked sequence scores all its blocks; the device version keeps bounds on write_kv.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/tensor.h"
#include "core/kv/kv_spec.h"
#include "core/sched/batch_plan.h"
#include "model/forward_context.h"
#include "spec/block_bounds.h"

namespace drift::engine {

class SpecPvScorer final : public model::QueryTap {
 public:
  SpecPvScorer(spec::BlockScore form, std::vector<core::KvSpec> kv_specs, int32_t block_size);

  // Before the step's forward: scores plan.seqs[k] for each k in `tracked` (ascending). A scheduled
  // sequence not tracked loses its bounds, since the step writes blocks it would not see.
  void begin_step(const core::BatchPlan& plan, std::span<const size_t> tracked);
  void on_queries(int32_t kv_group, const Tensor& q, int64_t q_row_stride, const Tensor& k_cache) override;
  // [logical blocks of its last scored step] a sequence's scores; empty: none yet.
  std::span<const float> scores(int64_t seq_id) const;
  void forget(int64_t seq_id);

 private:
  struct Tracked {
    int64_t seq_id = 0;
    const core::Sequence* seq = nullptr;
    int64_t first_row = 0;        // its new tokens' rows in the step
    int32_t num_rows = 0;
    int32_t num_tokens = 0;       // in KV after the step
    int32_t first_dirty = 0;      // first logical block whose bounds the step changes
  };
  struct LayerBounds {
    HostTensor key_min, key_max;  // [cache blocks, num_kv_heads, head_dim] fp32
  };
  void score_layer(const Tracked& t, int32_t kv_group, const Tensor& q, int64_t q_row_stride, const LayerBounds& b);

  spec::BlockScore form_;
  std::vector<core::KvSpec> kv_specs_;
  int32_t block_size_;
  std::vector<Tracked> step_;
  int32_t layer_ = 0;                       // GQA layers seen this step (the layer's index in layers_)
  std::vector<LayerBounds> layers_;         // allocated at a layer's first call
  std::unordered_map<int64_t, std::vector<float>> scores_;
  std::unordered_map<int64_t, bool> bounded_;  // sequences whose blocks before the step have bounds
  std::vector<float> q_;                    // one sequence's queries, packed
};

}  // namespace drift::engine
