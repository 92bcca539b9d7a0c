// TensorParallelModel: one model split over the ranks of a host, driven as one Model, so the runner,
// the scheduler and the sampler stay as they are for one rank. Rank r is backend ops[r] (each with its
// communicator; rank 0's is the caller's) and a DecoderModel that loaded rank r's share of the weights;
// every call runs on all ranks at once (backend::RankThreads). A step's inputs are made on rank 0 by the
// runner and broadcast to the others through the communicator (device memory of each rank's own GPU);
// every rank ends a step with the whole logits (the LM head's all-gather), and rank 0's are the ones the
// runner samples.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/comm/rank_threads.h"
#include "model/model.h"
#include "model/registry.h"

namespace drift::model {

// The backends of a group: rank 0's (borrowed, the caller's) and the others (owned by the model). Every one
// has a communicator of the same group.
struct RankBackends {
  backend::Ops* first = nullptr;
  std::vector<std::unique_ptr<backend::Ops>> others;

  int32_t world_size() const { return 1 + int32_t(others.size()); }
};

// Loads rank r's share of the model on every backend at once; the first rank to fail names itself.
Expected<std::unique_ptr<Model>> load_tensor_parallel(const std::string& model_dir, RankBackends ranks,
                                                      const LoadOptions& options);

}  // namespace drift::model
