// EAGLE-3 draft head (../shared/research/algorithms.md §1): fc over three hidden states captured from the
// target, one decoder layer over [input_layernorm(embedding) | hidden_norm(hidden)], a final norm and an
// LM head over the draft vocabulary, whose ids map to the target's through d2t.
//
// The head is a Model, so a ModelRunner drives it over its own paged cache (one layer, one KV group) with
// the usual ForwardContext (positions, slot mapping, block tables, tree masks). What the runner does not
// carry, the input hidden state of each row, is written into input_hidden() before the step: fused target
// features (fuse_taps) or a parent's pre-norm output (output_hidden() of an earlier step). Its cache is one
// KV group, "eagle3" ({kv_heads, head_dim}, one layer), zeroed when allocated. Step buffers (input_hidden,
// output_hidden, fuse_taps' scratch) exist once allocate_workspace() ran (a ModelRunner's constructor).
//
// Per row: x = [input_layernorm(embed(token)) | hidden_norm(h)] (embedding first); h1 = residual +
// o_proj(attention(x)), the residual h (hidden_norm(h) with norm_before_residual); h2 = h1 +
// mlp(post_attention_layernorm(h1)). output_hidden() holds h2; logits rows are lm_head(norm(h2)) [Vd].
//
// Positions (the engine sets them through ctx.positions; the head only reads them): the draft row whose
// input token is target token t_{i+1} and whose hidden is the target's feature g_i (captured at target
// position i) has RoPE position i and writes the draft-cache slot of position i. A drafted node at tree
// depth d after a context whose last catch-up row is at position b-1 has position b-1+d.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "model/registry.h"

namespace drift::model {

// The head's config.json beyond the Llama keys, in one convention.
struct Eagle3Config {
  int64_t target_hidden = 0;  // Ht: width of each captured state (target_hidden_size; default hidden_size)
  int64_t draft_vocab = 0;    // Vd (draft_vocab_size; default vocab_size)
  // Target layers whose *incoming* residual stream is captured, low/mid/high (Model::set_hidden_taps order).
  // Checkpoints write eagle_aux_hidden_state_layer_ids as output-of-layer ids (SGLang, ModelOpt, SpecForge):
  // id + 1 here. Absent: (2, L/2, L-3) of the target's L layers, as EAGLE's reference code captures, each
  // kept in [0, L] (a target of few layers).
  std::vector<int32_t> capture_layers;
  bool norm_before_residual = false;  // residual taken after hidden_norm (vLLM speculators heads)
  // An RMSNorm (input_norm.weight [3*Ht]) over the joined features before fc: gpt-oss heads
  // (speculators PR 337, vLLM PR 36545).
  bool norm_before_fc = false;
};

class Eagle3Head : public Model {
 public:
  // Rows the step reads as each token's input hidden state: [max_tokens, hidden], filled before forward().
  virtual Tensor input_hidden() const = 0;
  // Pre-norm output of every row of the latest step: [max_tokens, hidden] (the next depth's input).
  virtual Tensor output_hidden() const = 0;
  // out[i] = fc(concat(taps[0][rows[i]], taps[1][rows[i]], taps[2][rows[i]])) (after norm_before_fc).
  // taps: the target's hidden_taps() [3, max_target_tokens, Ht]; rows: [R] int32 on the device, R at most
  // the head's max_tokens; out: [R, hidden] (usually input_hidden() rows). Queued like a step: no sync.
  virtual void fuse_taps(const Tensor& taps, const Tensor& rows, const Tensor& out) = 0;
  // [draft_vocab] target token id of each draft id (i + d2t[i]; the identity without d2t).
  virtual std::span<const int32_t> draft_to_target() const = 0;
  const Eagle3Config& eagle() const { return eagle_; }

 protected:
  Eagle3Head(weights::ModelConfig config, Eagle3Config eagle) : Model(std::move(config)), eagle_(std::move(eagle)) {}
  Eagle3Config eagle_;
};

// The `architectures` values of EAGLE-3 head folders (load_model() refuses them: a head is not a model).
bool is_eagle3_architecture(std::string_view architecture);

// Loads a head folder (config.json with architectures LlamaForCausalLMEagle3 / Eagle3LlamaForCausalLM /
// GptOssForCausalLMEagle3 + safetensors) for `target` on `ops`. The token embedding is the head's own
// embed_tokens.weight when the checkpoint has one, else the target's (Model::token_embedding()). Checks
// that the head fits the target (Ht, vocab, capture layers in range) and names what does not.
// vocab_size() of the returned model is the draft vocabulary. `target` must outlive the head when the
// head embeds with the target's table. options.random_weights is ignored (random_eagle3_head makes those);
// options.max_positions sizes the RoPE table (0: the longer of the head's and the target's).
Expected<std::unique_ptr<Eagle3Head>> load_eagle3_head(const std::string& head_dir, const Model& target,
                                                       backend::Ops& ops, const LoadOptions& options = {});

// The shape of a random head; 0 or empty: as the target (draft_vocab: the target's vocabulary, and then
// d2t is the identity; capture_layers: the default (2, L/2, L-3)).
struct Eagle3Shape {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, intermediate_size = 0;
  int64_t draft_vocab = 0;
  std::vector<int32_t> capture_layers;  // input-of-layer ids, as Eagle3Config::capture_layers
  bool norm_before_residual = false, norm_before_fc = false;
  float std = 0.02f;                    // of the Normal weights (norms: 1 + Normal)
};

// A head of seeded random weights shaped after `target` (hidden = the target's, its embedding table), for
// engine tests of every family and benchmarks. With a draft vocabulary smaller than the target's, draft id
// i maps to target id floor(i * V / Vd): distinct, ascending, deterministic.
Expected<std::unique_ptr<Eagle3Head>> random_eagle3_head(const Model& target, backend::Ops& ops, uint64_t seed,
                                                         Eagle3Shape shape = {});

}  // namespace drift::model
