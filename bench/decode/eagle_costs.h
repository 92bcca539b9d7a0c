// EAGLE-3's step costs on a target the decode bench has loaded (issue 14's projection): a verify step of
// a draft tree of T tokens beside a one-token decode step at the same context, and one drafting round of
// a random head of the target's shape (fused features, catch-up, depth - 1 tree expansions with the host's
// tree building), each timed as the engine runs it (ModelRunner steps, logits or samples to the host).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "model/model.h"
#include "runner/model_runner.h"

namespace drift::bench {

struct EagleCostRow {
  std::string what;
  int rows = 0;      // tokens the step runs
  double ms = 0;     // median wall-clock per step (or per round)
};

struct EagleCostInputs {
  model::Model* target = nullptr;
  runner::ModelRunner* runner = nullptr;  // the target's, its prompt already in KV
  backend::Ops* ops = nullptr;
  std::span<const int32_t> tokens;        // the sequence: context tokens, then room for a tree
  std::vector<std::vector<int32_t>> table;  // its block table (every KV group)
  int32_t context = 0;                    // tokens in KV
  int32_t first_free_block = 0;           // head-cache blocks from here are scratch
  std::vector<int> tree_sizes{16, 32, 64};
  int depth = 7, top_k = 8;
  int64_t draft_vocab = 32000;
};

std::vector<EagleCostRow> eagle_costs(const EagleCostInputs& in);

}  // namespace drift::bench
