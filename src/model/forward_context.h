// ForwardContext: everything one forward step needs besides the weights, as device tensors the runner
// filled before the step. Model code reads it; only runner/ builds it from a BatchPlan (contract 7).
#pragma once

#include <cstdint>
#include <vector>

#include "base/tensor.h"

namespace drift::model {

struct KvGroupContext {
  Tensor slot_mapping;   // [num_tokens] int32: KV slot (block * block_size + offset) each token writes; -1 none
  Tensor block_tables;   // [num_seqs, max_blocks_per_seq] int32; -1 where a window released the block
};

struct ForwardContext {
  int32_t num_tokens = 0;   // new tokens in this step, all sequences together
  int32_t num_seqs = 0;
  int32_t num_logits = 0;   // rows of logits wanted (one per sampling sequence)

  Tensor token_ids;      // [num_tokens] int32
  Tensor positions;      // [num_tokens] int32: position of each new token in its sequence
  // One per KV layer group (the model's kv_specs order): each group has its own pool and block tables.
  std::vector<KvGroupContext> kv_groups;
  Tensor query_start;    // [num_seqs + 1] int32: cumulative new-token counts
  Tensor context_lens;   // [num_seqs] int32: KV length after this step
  Tensor logits_rows;    // [num_logits] int32: which rows of the hidden state become logits
};

}  // namespace drift::model
