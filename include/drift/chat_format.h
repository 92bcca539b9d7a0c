// ChatFormat: how a model family writes chat prompts. The model says which (its family's description);
// the server and the CLI render and parse replies accordingly.
#pragma once

#include <cstdint>

namespace drift {

// kTemplate: the Jinja chat template in the model folder. kHarmony: OpenAI's harmony format (GPT-OSS),
// which Drift renders and parses by code (tokenizer/harmony.h).
enum class ChatFormat : uint8_t { kTemplate, kHarmony };

}  // namespace drift
