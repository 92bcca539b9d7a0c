// Llama family: Llama 2/3, Qwen2 / Qwen2.5, Qwen3. Pre-norm decoder layers of GQA attention and a SwiGLU
// MLP; the members differ only in config fields (biases, qk-norm, tied embeddings, RoPE scaling, windows),
// which the shared decoder reads: nothing here beyond the family's name in the registry.
#include "model/decoder_model.h"

namespace drift::model {

namespace {

const DecoderFamily kLlama{};

}  // namespace

Expected<std::unique_ptr<Model>> build_llama(const weights::ModelConfig& config, WeightLoader& loader) {
  return build_decoder(config, loader, kLlama);
}

}  // namespace drift::model
