#include "eagle3_head_folder.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "model/registry.h"
#include "model_copy.h"
#include "weights/safetensors.h"

namespace drift::testing {

namespace {

namespace fs = std::filesystem;

float round_to(DType dtype, float value) {
  if (dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(value));
  if (dtype == DType::kF16) return f16_to_f32(f32_to_f16(value));
  return value;
}

std::vector<std::byte> bytes_of(const HeadTensor& t) {
  const size_t elem = dtype_size(t.dtype);
  std::vector<std::byte> bytes(t.values.size() * elem);
  for (size_t i = 0; i < t.values.size(); ++i) {
    if (t.dtype == DType::kF32) {
      std::memcpy(bytes.data() + i * elem, &t.values[i], elem);
    } else {
      const uint16_t bits = t.dtype == DType::kBF16 ? f32_to_bf16(t.values[i]) : f32_to_f16(t.values[i]);
      std::memcpy(bytes.data() + i * elem, &bits, elem);
    }
  }
  return bytes;
}

}  // namespace

void HeadFolder::store_as(DType dtype) {
  for (auto& [name, t] : tensors) {
    t.dtype = dtype;
    for (float& v : t.values) v = round_to(dtype, v);
  }
}

std::string HeadFolder::write() const {
  const fs::path dir = fresh_temp_dir("drift-eagle3-head");
  std::vector<weights::TensorToWrite> out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.dtype, t.shape, bytes_of(t));
  if (!d2t.empty()) {
    std::vector<std::byte> bytes(d2t.size() * dtype_size(d2t_dtype));
    for (size_t i = 0; i < d2t.size(); ++i) {
      if (d2t_dtype == DType::kI64) {
        std::memcpy(bytes.data() + i * 8, &d2t[i], 8);
      } else {  // a wrongly typed d2t (tests of the loader's check): the ids as F32
        const float v = float(d2t[i]);
        std::memcpy(bytes.data() + i * 4, &v, 4);
      }
    }
    out.emplace_back("d2t", d2t_dtype, std::vector<int64_t>{int64_t(d2t.size())}, std::move(bytes));
  }
  if (Status s = weights::write_safetensors((dir / "model.safetensors").string(), out, {{"format", "pt"}}); !s.ok())
    throw std::runtime_error(s.to_string());
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

HeadFolder random_head_folder(const model::Model& target, int64_t draft_vocab, int64_t ffn, uint64_t seed,
                              const std::string& prefix) {
  const weights::ModelConfig& t = target.config();
  const int64_t h = t.hidden_size, q = t.num_heads * t.head_dim, kv = t.num_kv_heads * t.head_dim;
  HeadFolder f;
  f.config = {{"architectures", {"LlamaForCausalLMEagle3"}}, {"model_type", "llama"}, {"hidden_size", h},
              {"intermediate_size", ffn}, {"num_hidden_layers", 1}, {"num_attention_heads", t.num_heads},
              {"num_key_value_heads", t.num_kv_heads}, {"head_dim", t.head_dim}, {"rms_norm_eps", 1e-5},
              {"rope_theta", 10000.0}, {"max_position_embeddings", 256}, {"vocab_size", t.vocab_size},
              {"draft_vocab_size", draft_vocab}, {"tie_word_embeddings", false}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean) {
    HeadTensor tensor{shape, {}, DType::kF32};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) tensor.values.push_back(mean + normal(rng));
    f.tensors[name] = std::move(tensor);
  };
  add("fc.weight", {h, 3 * h}, 0.0f);
  for (const char* norm : {".hidden_norm.weight", ".input_layernorm.weight", ".post_attention_layernorm.weight"})
    add(prefix + norm, {h}, 1.0f);
  add(prefix + ".self_attn.q_proj.weight", {q, 2 * h}, 0.0f);
  add(prefix + ".self_attn.k_proj.weight", {kv, 2 * h}, 0.0f);
  add(prefix + ".self_attn.v_proj.weight", {kv, 2 * h}, 0.0f);
  add(prefix + ".self_attn.o_proj.weight", {h, q}, 0.0f);
  add(prefix + ".mlp.gate_proj.weight", {ffn, h}, 0.0f);
  add(prefix + ".mlp.up_proj.weight", {ffn, h}, 0.0f);
  add(prefix + ".mlp.down_proj.weight", {h, ffn}, 0.0f);
  add("norm.weight", {h}, 1.0f);
  add("lm_head.weight", {draft_vocab, h}, 0.0f);
  const bool spread = 2 * draft_vocab <= t.vocab_size;
  for (int64_t i = 0; i < draft_vocab; ++i) f.d2t.push_back(spread ? i + 1 : 0);
  return f;
}

std::string write_random_head_for(const std::string& model_dir, uint64_t seed) {
  auto ops = backend::make_cpu_ops();
  auto target = model::load_model(model_dir, *ops);
  EXPECT_TRUE(target.ok()) << target.status().to_string();
  if (!target.ok()) return "";
  return random_head_folder(**target, (*target)->vocab_size() / 2, 64, seed).write();
}

}  // namespace drift::testing
