// ModelRunner: turns one step's scheduled sequences into the ForwardContext (positions, slot mapping,
// block tables, cu_seqlens, tree masks, logits rows) in buffers allocated once, runs the model, and returns
// either the logits on the host or, with a device sampler, the sampled tokens. It knows block ids, not how
// they were chosen: a step arrives as the scheduler's BatchPlan, or as SeqStep rows.
//
// Every step's int32 inputs are packed into one page-locked staging arena and go up in one copy. A
// uniform step (every sequence the same number k of new tokens and of logits rows, with k <= block_size
// or a draft tree: plain decode, or a speculative verify of k - 1 drafts) that samples on the device is
// padded to a batch bucket (1, 2, 4, ... max_num_seqs) and replayed from a CUDA graph captured the first
// time its shape came up; the padding rows read and write only a scratch KV block that the scheduler
// never hands out, so they cannot touch a real sequence.
#pragma once

#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "drift/status.h"

#include "backend/ops.h"
#include "core/sched/batch_plan.h"
#include "core/spec/draft_tree.h"
#include "core/spec/partial_view.h"
#include "model/model.h"
#include "sample/device_sampler.h"

namespace drift::runner {

struct RunnerConfig {
  int32_t max_num_tokens = 2048;   // per step
  int32_t max_num_seqs = 256;      // per step
  int32_t block_size = 16;
  // [the model's KV layer groups] blocks of each group's pool, each group with its own block tables (the
  // runner allocates one more in each: the scratch block). A sliding-window group may have fewer.
  std::vector<int32_t> num_blocks;
  int32_t max_model_len = 4096;    // bounds the block table width
  std::optional<DType> kv_dtype;   // the KV cache's element type; unset: the backend's compute dtype
  // Replay uniform steps of step_and_sample() from graphs, when the backend can capture them.
  bool cuda_graphs = true;
  // Block tables go up as wide as the power of two covering the step's longest, but at least this many
  // columns: a model whose attention costs little either way (a draft head) captures one graph per step
  // shape for every context up to it, instead of one per power of two.
  int32_t min_table_width = 1;

  int32_t num_kv_groups() const { return int32_t(num_blocks.size()); }
};

struct SeqStep {
  std::span<const int32_t> tokens;       // the sequence's tokens so far (prompt + output, + drafts)
  int32_t num_computed = 0;              // tokens already in KV
  int32_t num_new = 0;                   // computed now: tokens[num_computed, num_computed + num_new)
  // Per KV group: block ids covering at least num_computed + num_new tokens (-1: released by a window).
  std::span<const std::vector<int32_t>> block_tables;
  bool wants_logits = false;             // logits of the last new token
  bool all_logits = false;               // logits of every new token (perplexity, prompt logprobs)
  // Logits of these new tokens instead (indices into [0, num_new), ascending): a verify step wants the
  // last verified token's row and each draft's. Overrides the two flags when not empty.
  std::span<const int32_t> logit_rows;
  // A draft tree among the new tokens (EAGLE): each new token's position (the context length plus its
  // depth), and its ancestor-or-self bits, ceil(num_new / 32) words per new token (bit j: new token j).
  // Both empty: the new tokens are a chain at positions num_computed, num_computed + 1, ...
  std::span<const int32_t> positions;
  std::span<const uint32_t> tree_mask;
  // SpecPV: per KV group, the subset of the block table attention reads (a view with no blocks: the
  // whole table). Empty: every group reads its whole table.
  std::span<const core::PartialView> views;
};

class ModelRunner {
 public:
  // `sampler` (optional) samples rows of logits where the backend keeps them, for step_and_sample().
  ModelRunner(model::Model& model, backend::Ops& ops, const RunnerConfig& config,
              std::unique_ptr<sample::DeviceSampler> sampler = nullptr);

  // Runs one step. Logits rows come in SeqStep order, each sequence's in ascending order.
  // Returns host logits [rows, vocab]; valid until the next step.
  Expected<std::span<const float>> step(std::span<const SeqStep> seqs);
  // Runs one step and samples one token from every logits row on the device, with sampling[i] for the
  // i-th row; only the results come back to the host (valid until the next step). Needs a device sampler.
  // `while_running` (optional) runs on the host after the step's work is queued and before sampling
  // reads `sampling`: host work that only the sampler needs (structured-output masks) overlaps the forward.
  Expected<std::span<const sample::SampleResult>> step_and_sample(std::span<const SeqStep> seqs,
                                                                  std::span<const sample::RowSampling> sampling,
                                                                  const std::function<void()>& while_running = {});

  // Overlapped scheduling (engine/README.md): a token of the step that the previous launch samples, so not
  // on the host yet. It must be its sequence's last token and one of the step's new tokens.
  struct FedToken {
    int32_t seq = 0;       // index into the step's sequences
    int32_t from_row = 0;  // the previous launch's sampled row
  };
  // step_and_sample() in three calls. launch_forward() queues the step, its `fed` tokens copied on the
  // device from the latest sampling launched; launch_sampling() then queues the step's sampling (its rows
  // may be built after the previous step's tokens were read: penalties and masks see them); wait_sampled()
  // returns the sampling's results (valid until the next wait). A forward may be queued behind a sampling
  // not yet waited for; its own sampling comes after that wait.
  Status launch_forward(std::span<const SeqStep> seqs, std::span<const FedToken> fed = {});
  Status launch_sampling(std::span<const sample::RowSampling> sampling);
  Expected<std::span<const sample::SampleResult>> wait_sampled();
  // Forgets a forward whose sampling will not be launched (its step failed): the next forward may go.
  void drop_forward() { forward_rows_ = -1; }

  // The same for a scheduled step: each sequence's new tokens, and logits rows for those that sample
  // (samples): its last new token's, or with drafts the last verified token's and each draft's.
  // `views` (SpecPV): empty, or one entry per plan.seqs, each SeqStep::views of that sequence.
  using PlanViews = std::span<const std::vector<core::PartialView>>;
  Expected<std::span<const float>> step(const core::BatchPlan& plan, PlanViews views = {});
  Expected<std::span<const sample::SampleResult>> step_and_sample(const core::BatchPlan& plan,
                                                                  std::span<const sample::RowSampling> sampling,
                                                                  const std::function<void()>& while_running = {},
                                                                  PlanViews views = {});
  Status launch_forward(const core::BatchPlan& plan, std::span<const FedToken> fed);
  // Logits rows a scheduled sequence gets: 0, 1, or 1 + its drafts.
  static int32_t num_logits(const core::ScheduledSeq& s);
  // The most tokens a step of one sequence may compute with a draft tree (the tokens before its root
  // included): 8 mask words a token.
  static constexpr int32_t kMaxTreeTokens = 256;

  bool samples_on_device() const { return sampler_ != nullptr; }
  // Seconds over every step so far: launching (checks, packing, upload and enqueuing the forward) and
  // waiting for its results (the sampled rows or the logits on the host).
  struct StepTimes {
    double launch = 0, wait = 0;
  };
  const StepTimes& step_times() const { return step_times_; }
  // SpecPV: every step's attention layers hand their queries to `tap` (null: none). Host backends only.
  void set_query_tap(model::QueryTap* tap) { query_tap_ = tap; }
  const RunnerConfig& config() const { return config_; }
  // Benchmarks time the same steps with and without graphs.
  void set_cuda_graphs(bool on) { config_.cuda_graphs = on; }
  int64_t vocab_size() const { return model_.vocab_size(); }
  // Graphs captured so far and steps replayed from one (benchmarks and tests read these).
  int64_t num_graphs() const { return int64_t(graphs_.size()); }
  int64_t num_graph_replays() const { return graph_replays_; }

 private:
  // What a step holds, from checking its sequences.
  struct StepShape {
    int32_t num_seqs = 0, num_tokens = 0, num_logits = 0;
    int32_t max_new = 0;       // the most new tokens of one sequence
    int32_t width = 0;         // block-table columns passed to the kernels
    int32_t mask_words = 0;    // tree-mask words per token; 0: every sequence a chain
    int32_t uniform_new = 0;   // when every sequence has this many new tokens and uniform_logits rows; else 0
    int32_t uniform_logits = 0;
    bool views = false;        // some sequence reads a view (SpecPV)
  };
  // Where each input of a step sits in the packed int32 arenas (host staging and device).
  struct Layout {
    int32_t num_tokens = 0, num_seqs = 0, num_logits = 0, width = 0, mask_words = 0, num_fed = 0;
    int64_t token_ids = 0, positions = 0, context_lens = 0, query_start = 0, logits_rows = 0;
    int64_t slot_mapping = 0;  // group g's [num_tokens] at slot_mapping + g * num_tokens
    int64_t block_tables = 0;  // group g's [num_seqs, width] at block_tables + g * num_seqs * width
    int64_t tree_mask = 0;     // [num_tokens, mask_words] uint32 bits
    bool views = false;        // with views, per group g: block_positions [num_seqs, width], view_blocks [num_seqs]
    int64_t block_positions = 0, view_blocks = 0;
    int64_t fed_rows = 0, fed_from = 0;  // [num_fed] each: the token row a fed token goes to, its sampled row
    int64_t size = 0;
  };
  // A captured step's shape: (bucket, new tokens per sequence, logits per sequence, width, mask words,
  // whether block tables are views).
  using GraphKey = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, bool>;

  Layout layout(int32_t num_tokens, int32_t num_seqs, int32_t num_logits, int32_t width, int32_t mask_words,
                bool views = false, int32_t num_fed = 0) const;
  // The smallest decode graph bucket holding num_seqs sequences; 0 when there is none.
  int32_t decode_bucket(int32_t num_seqs) const;
  Expected<StepShape> check(std::span<const SeqStep> seqs) const;
  void pack(std::span<const SeqStep> seqs, const Layout& l);
  void pack_views(const SeqStep& seq, int32_t s, const Layout& l);
  void pack_padding(int32_t num_real_seqs, int32_t new_per_seq, int32_t logits_per_seq, const Layout& l);
  Status check_fed(std::span<const SeqStep> seqs, std::span<const FedToken> fed) const;
  // Packs the fed tokens' rows; after the upload, copies their tokens in from the sampler's on the device.
  void pack_fed(std::span<const SeqStep> seqs, std::span<const FedToken> fed, const Layout& l);
  void copy_fed(const Layout& l);
  model::ForwardContext context(const Layout& l) const;
  // Checks, packs and uploads the step's inputs and runs the forward (from a graph when allowed and the
  // step is uniform). The step's logits rows are then rows [0, n) of logits_; returns n.
  Expected<int32_t> forward(std::span<const SeqStep> seqs, bool allow_graph, std::span<const FedToken> fed = {});
  // forward() before the model's status is checked.
  Expected<int32_t> run_forward(std::span<const SeqStep> seqs, bool allow_graph, std::span<const FedToken> fed);
  // The SeqStep rows of a scheduled step (into plan_steps_).
  std::span<const SeqStep> rows_of(const core::BatchPlan& plan, PlanViews views);
  static bool verifies_tree(const core::Sequence& seq, int32_t end);

  model::Model& model_;
  backend::Ops& ops_;
  RunnerConfig config_;
  std::unique_ptr<sample::DeviceSampler> sampler_;
  int32_t max_blocks_per_seq_;
  int32_t max_mask_words_;
  std::vector<int32_t> scratch_blocks_;  // [KV groups] the block padding rows use: num_blocks[g], past the pool
  backend::Buffer staging_, inputs_;  // packed int32 step inputs: page-locked host, device
  // Passed once the last upload from staging_ has run: a step that samples nothing returns before its
  // queued work runs, and the next step's pack() must not rewrite what that upload has yet to read.
  std::unique_ptr<backend::QueueMark> staging_read_;
  backend::Buffer logits_;
  backend::Buffer fed_tokens_;         // [max_num_seqs] int32: fed tokens gathered from the sampler's
  int32_t forward_rows_ = -1;          // logits rows of the forward launched and not yet sampled; -1: none
  int32_t last_sampled_rows_ = -1;     // rows of the latest launch_sampling(); -1: none yet
  std::vector<float> h_logits_;
  std::vector<int32_t> buckets_;
  std::vector<int32_t> row_index_;     // 0, 1, 2, ...: logit_rows of a scheduled step point into it
  std::vector<SeqStep> plan_steps_;
  std::vector<core::TreeRows> plan_trees_;  // positions and masks of the plan's draft trees
  std::map<GraphKey, std::unique_ptr<backend::CapturedWork>> graphs_;
  int64_t graph_replays_ = 0;
  StepTimes step_times_;
  model::QueryTap* query_tap_ = nullptr;
};

}  // namespace drift::runner
