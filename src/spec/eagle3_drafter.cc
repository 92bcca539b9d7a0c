#include "spec/eagle3_drafter.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"

namespace drift::spec {

namespace {

int32_t blocks_for(int32_t tokens, int32_t block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace

struct Eagle3Drafter::Growing {
  int64_t seq_id = 0;
  const core::Sequence* seq = nullptr;
  int32_t context = 0;  // the head's computed positions: the target's num_computed
  int32_t slot = 0;     // its node_hidden_ rows and scratch blocks
  TreeBuilder builder;
  std::vector<std::vector<int32_t>> table;  // the head's one block table
  std::vector<int32_t> tokens;              // [context + expanded]; only the expanded tail is read
  std::vector<int32_t> positions, logit_rows;
  std::vector<uint32_t> mask;
};

Eagle3Drafter::Eagle3Drafter(std::unique_ptr<model::Eagle3Head> head, model::Model& target, backend::Ops& ops,
                             const Eagle3Geometry& geometry, const Eagle3Options& options,
                             std::unique_ptr<sample::DeviceSampler> sampler)
    : head_(std::move(head)), target_(target), ops_(ops), geometry_(geometry), options_(options) {
  top_params_.temperature = 0.0f;
  top_params_.top_logprobs = options.top_k;
  if (!top_params_.validate().ok()) sampler.reset();  // more children than the sampler ranks: on the host
  const int32_t bs = geometry.block_size;
  scratch_per_seq_ = blocks_for(max_expanded(), bs) + 1;
  runner::RunnerConfig config;
  config.max_num_seqs = geometry.max_num_seqs;
  config.max_num_tokens = std::max(geometry.max_num_tokens, geometry.max_num_seqs * max_expanded());
  config.block_size = bs;
  config.num_blocks = {geometry.pool_blocks + geometry.max_num_seqs * scratch_per_seq_};
  config.max_model_len = geometry.max_model_len + max_expanded() + bs;
  config.cuda_graphs = geometry.cuda_graphs;
  // One graph per step shape (catch-up length, depth) for contexts up to 4096 tokens: 1 KB of table a sequence.
  config.min_table_width = blocks_for(4096, bs);
  runner_ = std::make_unique<runner::ModelRunner>(*head_, ops, config, std::move(sampler));
  const int64_t hidden = head_->config().hidden_size;
  const DType dtype = head_->input_hidden().dtype;
  rows_a_ = ops.alloc(DType::kI32, {config.max_num_tokens});
  rows_b_ = ops.alloc(DType::kI32, {config.max_num_tokens});
  moved_ = ops.alloc(dtype, {int64_t(geometry.max_num_seqs) * options.top_k, hidden});
  node_hidden_ = ops.alloc(dtype, {int64_t(geometry.max_num_seqs) * max_expanded(), hidden});
}

backend::Buffer Eagle3Drafter::upload(backend::Buffer& buffer, std::span<const int32_t> values) {
  backend::Buffer part = buffer;
  part.view = buffer.view.slice(0, int64_t(values.size()));
  ops_.copy_from_host(part.view, values.data());
  return part;
}

void Eagle3Drafter::keep_hidden(std::span<const int32_t> src, std::span<const int32_t> dst) {
  DRIFT_CHECK_EQ(src.size(), dst.size());
  if (src.empty()) return;
  const Tensor from = upload(rows_a_, src).view, to = upload(rows_b_, dst).view;
  const Tensor held = moved_.view.slice(0, int64_t(src.size()));
  ops_.gather_rows(head_->output_hidden(), from, held);
  ops_.scatter_rows(held, to, node_hidden_.view);
}

Status Eagle3Drafter::observe(std::span<const DraftInput> inputs) {
  std::vector<Growing> growing;
  DRIFT_RETURN_IF_ERROR(catch_up(inputs, growing));
  if (!growing.empty()) DRIFT_RETURN_IF_ERROR(expand(growing));
  for (Growing& g : growing) trees_[g.seq_id] = g.builder.build();
  return Status::Ok();
}

Expected<std::span<const TopRow>> Eagle3Drafter::run_head(std::span<const runner::SeqStep> steps) {
  size_t rows = 0;
  for (const runner::SeqStep& step : steps) rows += step.logit_rows.size();
  tops_.resize(rows);
  if (runner_->samples_on_device()) {
    sampling_.assign(rows, sample::RowSampling{.params = &top_params_});
    DRIFT_ASSIGN_OR_RETURN(const std::span<const sample::SampleResult> picked, runner_->step_and_sample(steps, sampling_));
    for (size_t r = 0; r < rows; ++r) {
      tops_[r].clear();
      if (picked[r].token == sample::kNonFiniteLogits) continue;  // the head broke on this row: no children
      for (const sample::TokenLogprob& t : picked[r].top) tops_[r].emplace_back(t.token, t.logprob);
    }
  } else {
    DRIFT_ASSIGN_OR_RETURN(const std::span<const float> logits, runner_->step(steps));
    const size_t vocab = size_t(head_->vocab_size());
    for (size_t r = 0; r < rows; ++r) tops_[r] = top_logprobs(logits.subspan(r * vocab, vocab), options_.top_k);
  }
  return std::span<const TopRow>(tops_);
}

core::DraftTree Eagle3Drafter::take_tree(int64_t seq_id) {
  auto it = trees_.find(seq_id);
  if (it == trees_.end()) return {};
  core::DraftTree tree = std::move(it->second);
  trees_.erase(it);
  return tree;
}

// One head step over every sequence's kept rows (chains in the head's cache at their own positions);
// the last row of each sequence that wants a tree gives the root's children.
Status Eagle3Drafter::catch_up(std::span<const DraftInput> inputs, std::vector<Growing>& growing) {
  const int32_t bs = geometry_.block_size;
  std::vector<runner::SeqStep> steps;
  std::vector<std::vector<std::vector<int32_t>>> tables;
  std::vector<int32_t> taps, last_rows, first_rows;
  std::vector<const DraftInput*> stepped;
  tables.reserve(inputs.size());
  last_rows.reserve(inputs.size());
  for (const DraftInput& in : inputs) {
    const auto count = int32_t(in.tap_rows.size());
    const int32_t end = in.first + count;
    // Row i reads token i + 1, which must exist.
    if (count == 0 || end >= in.seq->num_tokens()) continue;
    const std::vector<int32_t>& full = in.seq->block_tables[size_t(geometry_.kv_group)];
    tables.push_back({std::vector<int32_t>(full.begin(), full.begin() + blocks_for(end, bs))});
    runner::SeqStep step{.tokens = std::span<const int32_t>(in.seq->tokens).subspan(1), .num_computed = in.first,
                         .num_new = count, .block_tables = tables.back()};
    if (in.wants_tree) {
      last_rows.push_back(count - 1);
      step.logit_rows = std::span<const int32_t>(&last_rows.back(), 1);
    }
    first_rows.push_back(int32_t(taps.size()));
    taps.insert(taps.end(), in.tap_rows.begin(), in.tap_rows.end());
    steps.push_back(step);
    stepped.push_back(&in);
  }
  if (steps.empty()) return Status::Ok();
  if (int64_t(taps.size()) > rows_a_.view.numel())
    return invalid_argument(fmt::format("EAGLE-3 catch-up of {} rows exceeds the head's {}", taps.size(), rows_a_.view.numel()));
  const Tensor rows = upload(rows_a_, taps).view;
  head_->fuse_taps(target_.hidden_taps(), rows, head_->input_hidden().slice(0, int64_t(taps.size())));
  DRIFT_ASSIGN_OR_RETURN(const std::span<const TopRow> tops, run_head(steps));
  std::vector<int32_t> src, dst;
  size_t row = 0;
  for (size_t k = 0; k < stepped.size(); ++k) {
    const DraftInput& in = *stepped[k];
    if (!in.wants_tree) continue;
    Growing& g = growing.emplace_back(Growing{.builder = TreeBuilder(options_.top_k, options_.num_tokens)});
    g.seq_id = in.seq->seq_id;
    g.seq = in.seq;
    g.context = in.first + int32_t(in.tap_rows.size());
    g.slot = int32_t(growing.size()) - 1;
    g.builder.start(tops[row++], head_->draft_to_target());
    // Every depth-1 node continues from the last catch-up row's state.
    for (int32_t e = 0; e < g.builder.frontier_size(); ++e) {
      src.push_back(first_rows[k] + int32_t(in.tap_rows.size()) - 1);
      dst.push_back(g.slot * max_expanded() + e);
    }
  }
  keep_hidden(src, dst);
  return Status::Ok();
}

// depth - 1 head steps. Step d runs every node expanded so far (depths 1..d, as a tree past the context:
// the kernels see new tokens only through the tree mask, so earlier depths run again rather than sit in
// the cache as context) and grows the frontier's children.
Status Eagle3Drafter::expand(std::vector<Growing>& growing) {
  const int32_t bs = geometry_.block_size, big = max_expanded();
  for (int32_t d = 1; d < options_.depth; ++d) {
    std::vector<runner::SeqStep> steps;
    std::vector<int32_t> hidden_rows, first_rows;
    for (Growing& g : growing) {
      const std::vector<int32_t>& expanded = g.builder.expanded();
      const auto n = int32_t(expanded.size());
      const auto& cands = g.builder.candidates();
      std::vector<int32_t> index_of(cands.size(), -1);  // candidate -> expanded row
      for (int32_t e = 0; e < n; ++e) index_of[size_t(expanded[size_t(e)])] = e;
      const int32_t words = (n + 31) / 32;
      g.tokens.resize(size_t(g.context + n));
      g.positions.assign(size_t(n), 0);
      g.mask.assign(size_t(n) * size_t(words), 0u);
      for (int32_t e = 0; e < n; ++e) {
        const TreeBuilder::Candidate& c = cands[size_t(expanded[size_t(e)])];
        g.tokens[size_t(g.context + e)] = c.token;
        g.positions[size_t(e)] = g.context - 1 + c.depth;
        for (int32_t a = expanded[size_t(e)]; a >= 0; a = cands[size_t(a)].parent) {
          const int32_t j = index_of[size_t(a)];
          g.mask[size_t(e) * size_t(words) + size_t(j / 32)] |= 1u << (j % 32);
        }
      }
      const std::vector<int32_t>& full = g.seq->block_tables[size_t(geometry_.kv_group)];
      const int32_t own = blocks_for(g.context, bs);
      std::vector<int32_t> table(full.begin(), full.begin() + own);
      for (int32_t b = own; b < blocks_for(g.context + n, bs); ++b)
        table.push_back(geometry_.pool_blocks + g.slot * scratch_per_seq_ + (b - own));
      g.table = {std::move(table)};
      g.logit_rows.resize(size_t(g.builder.frontier_size()));
      for (int32_t f = 0; f < g.builder.frontier_size(); ++f) g.logit_rows[size_t(f)] = n - g.builder.frontier_size() + f;
      first_rows.push_back(int32_t(hidden_rows.size()));
      for (int32_t e = 0; e < n; ++e) hidden_rows.push_back(g.slot * big + e);
      steps.push_back(runner::SeqStep{.tokens = g.tokens, .num_computed = g.context, .num_new = n,
                                      .block_tables = g.table, .logit_rows = g.logit_rows, .positions = g.positions,
                                      .tree_mask = g.mask});
    }
    const Tensor rows = upload(rows_a_, hidden_rows).view;
    ops_.gather_rows(node_hidden_.view, rows, head_->input_hidden().slice(0, int64_t(hidden_rows.size())));
    DRIFT_ASSIGN_OR_RETURN(const std::span<const TopRow> tops, run_head(steps));
    std::vector<int32_t> src, dst;
    size_t logit_row = 0;
    for (size_t k = 0; k < growing.size(); ++k) {
      Growing& g = growing[k];
      const auto before = int32_t(g.builder.expanded().size());
      const int32_t frontier = g.builder.frontier_size();
      std::vector<int32_t> row_of(g.builder.candidates().size(), -1);  // expanded candidate -> its row this step
      for (int32_t e = 0; e < before; ++e) row_of[size_t(g.builder.expanded()[size_t(e)])] = first_rows[k] + e;
      g.builder.grow(tops.subspan(logit_row, size_t(frontier)), head_->draft_to_target());
      logit_row += size_t(frontier);
      // A new frontier node's input is its parent's output state.
      for (int32_t e = before; e < int32_t(g.builder.expanded().size()) && e < big; ++e) {
        const int32_t parent = g.builder.candidates()[size_t(g.builder.expanded()[size_t(e)])].parent;
        src.push_back(row_of[size_t(parent)]);
        dst.push_back(g.slot * big + e);
      }
    }
    keep_hidden(src, dst);
  }
  return Status::Ok();
}

}  // namespace drift::spec
