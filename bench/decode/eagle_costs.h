// EAGLE-3's step costs on a target the decode bench has loaded (issue 14's projection): a verify step of
// a draft tree of T tokens beside a one-token decode step at the same context, and the drafting rounds of
// a random head of the target's shape run by the engine's own Eagle3Drafter (fused features, catch-up,
// depth - 1 tree expansions, the children of each node ranked by the device sampler), each timed as the
// engine runs it: runner steps replayed from graphs, only samples and top-k lists back to the host. Where
// the context outgrows SpecPV's default view (sink 32, retrieval 4096, window 128, buffer 20 + the tree),
// each verify step is timed again through such a view (issue 15).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "model/arch/eagle3.h"
#include "model/model.h"
#include "runner/model_runner.h"

namespace drift::bench {

struct EagleCostRow {
  std::string what;
  int rows = 0;      // tokens the step runs
  double ms = 0;     // median wall-clock per step (or per round)
};

struct EagleCostInputs {
  model::Model* target = nullptr;         // capturing the heads' hidden states
  runner::ModelRunner* runner = nullptr;  // the target's, its prompt already in KV
  backend::CudaOps* ops = nullptr;
  std::function<std::unique_ptr<model::Eagle3Head>()> make_head;  // a random head for each drafter
  std::span<const int32_t> tokens;        // the sequence: context tokens, then room for a tree
  std::vector<std::vector<int32_t>> table;  // its block table (every KV group)
  int32_t context = 0;                    // tokens in KV
  int32_t first_free_block = 0;           // head-cache blocks from here are scratch
  std::vector<int> tree_sizes{16, 32, 64};
  int depth = 7, top_k = 8;
};

std::vector<EagleCostRow> eagle_costs(const EagleCostInputs& in);

}  // namespace drift::bench
