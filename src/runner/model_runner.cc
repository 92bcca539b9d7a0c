#include "runner/model_runner.h"

#include <algorithm>

#include <fmt/format.h>

namespace drift::runner {

ModelRunner::ModelRunner(model::Model& model, backend::Ops& ops, const RunnerConfig& config)
    : model_(model), ops_(ops), config_(config) {
  max_blocks_per_seq_ = (config.max_model_len + config.block_size - 1) / config.block_size;
  const int32_t t = config.max_num_tokens, s = config.max_num_seqs;
  token_ids_ = ops.alloc(DType::kI32, {t});
  positions_ = ops.alloc(DType::kI32, {t});
  for (int32_t g = 0; g < config.num_kv_groups; ++g) {
    slot_mapping_.push_back(ops.alloc(DType::kI32, {t}));
    block_tables_.push_back(ops.alloc(DType::kI32, {s, max_blocks_per_seq_}));
  }
  h_slot_mapping_.resize(size_t(config.num_kv_groups));
  h_block_tables_.resize(size_t(config.num_kv_groups));
  query_start_ = ops.alloc(DType::kI32, {s + 1});
  context_lens_ = ops.alloc(DType::kI32, {s});
  logits_rows_ = ops.alloc(DType::kI32, {t});
  logits_ = ops.alloc(DType::kF32, {t, model.vocab_size()});
  model.allocate_workspace(t, t);
  model.allocate_kv_cache(config.num_blocks, config.block_size);
}

Expected<std::span<const float>> ModelRunner::step(std::span<const SeqStep> seqs) {
  const int32_t num_seqs = int32_t(seqs.size());
  if (num_seqs == 0 || num_seqs > config_.max_num_seqs)
    return invalid_argument(fmt::format("a step needs 1..{} sequences, got {}", config_.max_num_seqs, num_seqs));
  const size_t num_groups = size_t(config_.num_kv_groups);
  h_token_ids_.clear();
  h_positions_.clear();
  h_logits_rows_.clear();
  h_query_start_.assign(1, 0);
  h_context_lens_.clear();
  for (size_t g = 0; g < num_groups; ++g) {
    h_slot_mapping_[g].clear();
    h_block_tables_[g].assign(size_t(num_seqs) * size_t(max_blocks_per_seq_), -1);
  }
  const int32_t bs = config_.block_size;
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
    const int32_t first_row = int32_t(h_token_ids_.size());
    if (first_row + seq.num_new > config_.max_num_tokens)
      return invalid_argument(fmt::format("step exceeds max_num_tokens {}", config_.max_num_tokens));
    for (int32_t pos = seq.num_computed; pos < end; ++pos) {
      h_token_ids_.push_back(seq.tokens[size_t(pos)]);
      h_positions_.push_back(pos);
    }
    for (size_t g = 0; g < num_groups; ++g) {
      const std::vector<int32_t>& table = seq.block_tables[g];
      for (int32_t pos = seq.num_computed; pos < end; ++pos) {
        const int32_t block = table[size_t(pos / bs)];
        h_slot_mapping_[g].push_back(block < 0 ? -1 : block * bs + pos % bs);
      }
      std::copy(table.begin(), table.end(), h_block_tables_[g].begin() + size_t(s) * size_t(max_blocks_per_seq_));
    }
    h_query_start_.push_back(int32_t(h_token_ids_.size()));
    h_context_lens_.push_back(end);
    if (seq.all_logits) {
      for (int32_t r = first_row; r < int32_t(h_token_ids_.size()); ++r) h_logits_rows_.push_back(r);
    } else if (seq.wants_logits) {
      h_logits_rows_.push_back(int32_t(h_token_ids_.size()) - 1);
    }
  }
  const int32_t num_tokens = int32_t(h_token_ids_.size()), num_logits = int32_t(h_logits_rows_.size());

  model::ForwardContext ctx;
  ctx.num_tokens = num_tokens;
  ctx.num_seqs = num_seqs;
  ctx.num_logits = num_logits;
  auto upload = [&](const backend::Buffer& buf, const std::vector<int32_t>& host, int64_t rows) {
    const Tensor t = buf.view.slice(0, rows);
    ops_.copy_from_host(t, host.data());
    return t;
  };
  ctx.token_ids = upload(token_ids_, h_token_ids_, num_tokens);
  ctx.positions = upload(positions_, h_positions_, num_tokens);
  for (size_t g = 0; g < num_groups; ++g)
    ctx.kv_groups.push_back({upload(slot_mapping_[g], h_slot_mapping_[g], num_tokens),
                             upload(block_tables_[g], h_block_tables_[g], num_seqs)});
  ctx.query_start = upload(query_start_, h_query_start_, num_seqs + 1);
  ctx.context_lens = upload(context_lens_, h_context_lens_, num_seqs);
  ctx.logits_rows = upload(logits_rows_, h_logits_rows_, num_logits);

  const Tensor logits = logits_.view.slice(0, num_logits);
  model_.forward(ctx, logits);
  h_logits_.resize(size_t(num_logits) * size_t(model_.vocab_size()));
  ops_.copy_to_host(h_logits_.data(), logits);
  ops_.synchronize();
  return std::span<const float>(h_logits_);
}

}  // namespace drift::runner
