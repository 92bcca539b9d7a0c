// Picks the backend by name, and with it the sampler that samples on that backend's device. The only
// place that knows which backends this build has.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/ops.h"
#include "drift/status.h"
#include "sample/device_sampler.h"

namespace drift::engine {

struct Backend {
  std::unique_ptr<backend::Ops> ops;
  // The sampler for rows of up to max_rows x vocab logits on ops' device; null where sampling stays on
  // the host (the CPU backend).
  std::function<std::unique_ptr<sample::DeviceSampler>(int32_t max_rows, int64_t vocab)> make_sampler;
};

// "cpu", or "cuda" when this build has it.
Expected<Backend> make_backend(const std::string& device);

}  // namespace drift::engine
