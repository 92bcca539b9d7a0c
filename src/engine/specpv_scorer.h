// SpecPvScorer: SpecPV's retrieval scores from the sequences' own queries, on the engine's backend. It is
// the runner's query tap (model::QueryTap): during a step that scores, each full-attention layer hands it
// its queries and key cache; for each tracked sequence it brings that layer's per-block key bounds
// (ops.h: KeyBoundsParams, kept beside the cache on the device) up to date for the blocks written since
// the sequence was last scored, then scores all its blocks against the step's queries of the sequence
// (BlockScoreParams), max over layers. Only the scores, [logical blocks] a sequence, come back to the
// host, when the planner next asks.
//
// Which steps score is the planner's choice (SpecPvPlanner: a sequence's full verifications, as in
// SpecPV's refresh); a step that scores runs eagerly (QueryTap::active), the others as usual.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/ops.h"
#include "core/kv/kv_spec.h"
#include "core/sched/batch_plan.h"
#include "model/forward_context.h"

namespace drift::engine {

class SpecPvScorer final : public model::QueryTap {
 public:
  SpecPvScorer(backend::Ops& ops, backend::BlockScore form, std::vector<core::KvSpec> kv_specs, int32_t block_size);

  // Before the step's forward: the step scores plan.seqs[k] for each k in `tracked` (ascending).
  void begin_step(const core::BatchPlan& plan, std::span<const size_t> tracked);
  bool active() const override { return !step_.empty(); }
  void on_queries(int32_t kv_group, const Tensor& q, int64_t q_row_stride, const Tensor& k_cache) override;
  // [logical blocks at its last scored step] a sequence's scores; empty: none yet. Waits for the step
  // that scored them.
  std::span<const float> scores(int64_t seq_id);
  void forget(int64_t seq_id);

 private:
  struct Tracked {
    int64_t seq_id = 0;
    int32_t num_blocks = 0;  // logical blocks after the step
  };
  // One KV group's inputs of a step, in one device buffer: [entries | rows | blocks].
  struct GroupInputs {
    Tensor entries;  // [n, 2] int32: the blocks whose bounds the step recomputes, and their tokens
    Tensor rows;     // [segments, 2] int32
    Tensor blocks;   // [segments, width] int32
  };
  struct LayerBounds {
    backend::Buffer key_min, key_max;  // [cache blocks, kv_heads, head_dim], the cache's dtype
  };
  // Host words of group g's inputs for the step's sequences, appended to `words`; the offsets they start at.
  std::vector<size_t> pack_group(const core::BatchPlan& plan, std::span<const size_t> tracked, size_t g,
                                 std::vector<int32_t>& words) const;
  void upload(std::span<const int32_t> words, const std::vector<std::vector<size_t>>& offsets);
  void collect();

  backend::Ops& ops_;
  backend::BlockScore form_;
  std::vector<core::KvSpec> kv_specs_;
  int32_t block_size_;
  std::vector<Tracked> step_;
  int32_t width_ = 0;                    // scores' row width this step (the widest tracked sequence)
  bool pending_ = false;                 // scores_device_ holds a step's scores not yet collected
  std::vector<GroupInputs> inputs_;      // [KV groups] this step's (undefined for a sliding group)
  backend::Buffer inputs_device_, scores_device_;
  int32_t layer_ = 0;                    // layers seen this step (the index in layers_)
  std::vector<LayerBounds> layers_;      // allocated at a layer's first call
  std::unordered_map<int64_t, std::vector<float>> scores_;
  // Tokens of a sequence whose keys stay as they are: those before its last scored step's new ones. Its
  // blocks before that have current bounds.
  std::unordered_map<int64_t, int32_t> stable_tokens_;
  std::vector<float> host_scores_;
};

}  // namespace drift::engine
