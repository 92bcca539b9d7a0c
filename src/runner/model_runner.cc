#include "runner/model_runner.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

namespace drift::runner {

ModelRunner::ModelRunner(model::Model& model, backend::Ops& ops, const RunnerConfig& config,
                         std::unique_ptr<sample::DeviceSampler> sampler)
    : model_(model), ops_(ops), config_(config), sampler_(std::move(sampler)) {
  max_blocks_per_seq_ = (config.max_model_len + config.block_size - 1) / config.block_size;
  scratch_block_ = config.num_blocks;
  const int32_t t = config.max_num_tokens, s = config.max_num_seqs;
  // Decode buckets: powers of two below the largest batch, then the largest batch itself.
  const int32_t largest = std::min(s, t);
  for (int32_t b = 1; b < largest; b *= 2) buckets_.push_back(b);
  buckets_.push_back(largest);
  const int64_t arena = layout(t, s, max_blocks_per_seq_).size;
  staging_ = ops.alloc_host(DType::kI32, {arena});
  inputs_ = ops.alloc(DType::kI32, {arena});
  logits_ = ops.alloc(DType::kF32, {t, model.vocab_size()});
  model.allocate_workspace(t, t);
  model.allocate_kv_cache(config.num_blocks + 1, config.block_size);
}

ModelRunner::Layout ModelRunner::layout(int32_t num_tokens, int32_t num_seqs, int32_t width) const {
  Layout l;
  l.num_tokens = num_tokens;
  l.num_seqs = num_seqs;
  l.width = width;
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t begin = at;
    at += n;
    return begin;
  };
  const int64_t groups = config_.num_kv_groups;
  l.token_ids = take(num_tokens);
  l.positions = take(num_tokens);
  l.context_lens = take(num_seqs);
  l.query_start = take(num_seqs + 1);
  l.logits_rows = take(num_tokens);
  l.slot_mapping = take(groups * num_tokens);
  l.block_tables = take(groups * int64_t(num_seqs) * width);
  l.size = at;
  return l;
}

int32_t ModelRunner::decode_bucket(int32_t num_seqs) const {
  for (int32_t b : buckets_)
    if (b >= num_seqs) return b;
  return 0;
}

Expected<int32_t> ModelRunner::forward(std::span<const SeqStep> seqs, bool allow_graph) {
  const int32_t num_seqs = int32_t(seqs.size());
  if (num_seqs == 0 || num_seqs > config_.max_num_seqs)
    return invalid_argument(fmt::format("a step needs 1..{} sequences, got {}", config_.max_num_seqs, num_seqs));
  const size_t num_groups = size_t(config_.num_kv_groups);
  const int32_t bs = config_.block_size;

  // Check every sequence and size the step: tokens, logits rows, the widest block table it reads.
  int32_t num_tokens = 0, num_logits = 0, blocks_wide = 1;
  bool pure_decode = true;
  for (int32_t s = 0; s < num_seqs; ++s) {
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
    num_tokens += seq.num_new;
    if (num_tokens > config_.max_num_tokens)
      return invalid_argument(fmt::format("step exceeds max_num_tokens {}", config_.max_num_tokens));
    num_logits += seq.all_logits ? seq.num_new : (seq.wants_logits ? 1 : 0);
    blocks_wide = std::max(blocks_wide, blocks_needed);
    pure_decode = pure_decode && seq.num_new == 1 && seq.wants_logits && !seq.all_logits;
  }
  // Block tables are passed only as wide as a power of two covering the step, so the upload stays small
  // and a decode graph serves every step whose longest sequence falls in the same power of two.
  const int32_t width = std::min(max_blocks_per_seq_, int32_t(std::bit_ceil(uint32_t(blocks_wide))));
  const int32_t bucket = allow_graph && pure_decode ? decode_bucket(num_seqs) : 0;
  const Layout l = bucket > 0 ? layout(bucket, bucket, width) : layout(num_tokens, num_seqs, width);

  // Pack. Block-table columns past a sequence's last needed block are never read, so they are not written.
  int32_t* h = staging_.view.data_as<int32_t>();
  int32_t row = 0, logits_row = 0;
  h[l.query_start] = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const SeqStep& seq = seqs[size_t(s)];
    const int32_t end = seq.num_computed + seq.num_new;
    const int32_t first_row = row;
    for (int32_t pos = seq.num_computed; pos < end; ++pos, ++row) {
      h[l.token_ids + row] = seq.tokens[size_t(pos)];
      h[l.positions + row] = pos;
      for (size_t g = 0; g < num_groups; ++g) {
        const int32_t block = seq.block_tables[g][size_t(pos / bs)];
        h[l.slot_mapping + int64_t(g) * l.num_tokens + row] = block < 0 ? -1 : block * bs + pos % bs;
      }
    }
    for (size_t g = 0; g < num_groups; ++g)
      std::copy_n(seq.block_tables[g].begin(), (end + bs - 1) / bs,
                  h + l.block_tables + (int64_t(g) * l.num_seqs + s) * l.width);
    h[l.query_start + s + 1] = row;
    h[l.context_lens + s] = end;
    if (seq.all_logits) {
      for (int32_t r = first_row; r < row; ++r) h[l.logits_rows + logits_row++] = r;
    } else if (seq.wants_logits) {
      h[l.logits_rows + logits_row++] = row - 1;
    }
  }
  // Padding rows of a decode bucket: token 0 at position 0 of a one-token sequence that lives in the
  // scratch block, written and read there only.
  for (int32_t s = num_seqs; s < l.num_seqs; ++s) {
    h[l.token_ids + s] = 0;
    h[l.positions + s] = 0;
    for (size_t g = 0; g < num_groups; ++g) {
      h[l.slot_mapping + int64_t(g) * l.num_tokens + s] = scratch_block_ * bs;
      h[l.block_tables + (int64_t(g) * l.num_seqs + s) * l.width] = scratch_block_;
    }
    h[l.query_start + s + 1] = s + 1;
    h[l.context_lens + s] = 1;
    h[l.logits_rows + s] = s;
  }
  const Tensor all = inputs_.view.slice(0, l.size);
  ops_.copy_from_host(all, h);

  model::ForwardContext ctx;
  ctx.num_tokens = l.num_tokens;
  ctx.num_seqs = l.num_seqs;
  ctx.num_logits = bucket > 0 ? bucket : num_logits;
  auto part = [&](int64_t offset, int64_t n) { return all.slice(offset, offset + n); };
  ctx.token_ids = part(l.token_ids, l.num_tokens);
  ctx.positions = part(l.positions, l.num_tokens);
  for (size_t g = 0; g < num_groups; ++g)
    ctx.kv_groups.push_back(
        {part(l.slot_mapping + int64_t(g) * l.num_tokens, l.num_tokens),
         part(l.block_tables + int64_t(g) * l.num_seqs * l.width, int64_t(l.num_seqs) * l.width).view({l.num_seqs, l.width})});
  ctx.query_start = part(l.query_start, l.num_seqs + 1);
  ctx.context_lens = part(l.context_lens, l.num_seqs);
  ctx.logits_rows = part(l.logits_rows, ctx.num_logits);
  const Tensor logits = logits_.view.slice(0, ctx.num_logits);

  if (bucket == 0) {
    model_.forward(ctx, logits);
    return num_logits;
  }
  auto& graph = graphs_[{bucket, width}];
  if (graph != nullptr) {
    graph->replay();
    ++graph_replays_;
    return num_logits;
  }
  // First time for this shape: run it directly (which also builds any per-shape plans, such as
  // cuBLASLt's, on the host), then record the same launches for the steps to come.
  model_.forward(ctx, logits);
  ops_.begin_capture();
  model_.forward(ctx, logits);
  graph = ops_.end_capture();
  return num_logits;
}

Expected<std::span<const float>> ModelRunner::step(std::span<const SeqStep> seqs) {
  DRIFT_ASSIGN_OR_RETURN(const int32_t num_logits, forward(seqs, false));
  const Tensor logits = logits_.view.slice(0, num_logits);
  h_logits_.resize(size_t(num_logits) * size_t(model_.vocab_size()));
  ops_.copy_to_host(h_logits_.data(), logits);
  ops_.synchronize();
  return std::span<const float>(h_logits_);
}

Expected<std::span<const sample::SampleResult>> ModelRunner::step_and_sample(
    std::span<const SeqStep> seqs, std::span<const sample::RowSampling> sampling) {
  if (sampler_ == nullptr)
    return unsupported(fmt::format("the {} backend's runner has no device sampler", ops_.name()));
  size_t sampled = 0;
  for (const SeqStep& seq : seqs) {
    if (seq.all_logits) return invalid_argument("step_and_sample: all_logits needs step()");
    sampled += seq.wants_logits ? 1 : 0;
  }
  if (sampled != sampling.size())
    return invalid_argument(fmt::format("step_and_sample: {} sequences want a token but {} samplings were given",
                                        sampled, sampling.size()));
  const bool graphs = config_.cuda_graphs && ops_.supports_capture();
  DRIFT_ASSIGN_OR_RETURN(const int32_t num_logits, forward(seqs, graphs));
  if (num_logits == 0) return std::span<const sample::SampleResult>();
  return sampler_->sample(logits_.view.slice(0, num_logits), sampling);
}

}  // namespace drift::runner
