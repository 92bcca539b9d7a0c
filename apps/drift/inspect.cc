// drift inspect: what a model folder holds and what serving it costs, without loading the weights; a
// folder with config.json alone (bench/configs/) is enough for the KV figures.
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "commands.h"
#include "drift/model_info.h"

namespace drift::cli {

namespace {

struct InspectOptions {
  std::string model_dir = default_model_dir();
  int64_t context = 0;
  std::string kv_dtype = "bf16";
  std::string retrofit_file;
  int32_t block_size = EngineConfig{}.block_size;
  int32_t max_num_batched_tokens = EngineConfig{}.max_num_batched_tokens;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

void print_weights(const ModelInfo& m) {
  if (!m.has_weights) {
    std::printf("parameters     (no weights in the folder: config.json only)\n");
    return;
  }
  std::printf("parameters     %s (%s of weights)\n", fmt::format("{:L}", m.num_parameters).c_str(),
              human_bytes(double(m.weight_bytes)).c_str());
  std::string dtypes;
  for (const auto& [name, count] : m.parameters_by_dtype)
    dtypes += fmt::format("{}{} {:.1f}%", dtypes.empty() ? "" : ", ", name, 100.0 * double(count) / double(m.num_parameters));
  std::printf("stored dtypes  %s\n", dtypes.c_str());
}

// Per KV group at `context` tokens: what one request holds at its peak against full attention on every
// layer, the saving a sliding window brings (the engine sizes each group's pool the same way).
void print_kv_at_context(const ModelInfo& m, const KvFootprint& f, int32_t max_step_tokens) {
  std::printf("kv at context  %ld tokens, one request at its peak (blocks of %d tokens, steps of up to %d tokens)\n",
              long(f.context), f.block_size, max_step_tokens);
  std::printf("  %-10s %12s %8s %12s %16s\n", "group", "bytes/token", "blocks", "bytes", "full attention");
  for (size_t g = 0; g < m.kv_groups.size(); ++g) {
    const KvGroupInfo& k = m.kv_groups[g];
    std::printf("  %-10s %12s %8ld %12s %16s\n", k.name.c_str(), human_bytes(double(k.bytes_per_token)).c_str(),
                long(f.group_blocks[g]), human_bytes(double(f.group_bytes[g])).c_str(),
                human_bytes(double(f.group_full_attention_bytes[g])).c_str());
  }
  std::printf("  %-10s %12s %8s %12s %16s = %.1f%% of full attention on every layer\n", "total", "", "",
              human_bytes(double(f.bytes)).c_str(), human_bytes(double(f.full_attention_bytes)).c_str(),
              100.0 * f.fraction());
}

void run_inspect(const InspectOptions& o) {
  auto info = inspect_model(o.model_dir, o.kv_dtype, o.retrofit_file);
  if (!info.ok()) return fail(info.status().to_string());
  const ModelInfo& m = *info;
  std::printf("model          %s\n", o.model_dir.c_str());
  std::printf("architecture   %s (model_type %s)\n", m.architecture.c_str(), m.model_type.c_str());
  print_weights(m);
  std::printf("shape          %ld layers, hidden %ld, heads %ld (kv %ld), head_dim %ld, ffn %ld, vocab %ld\n",
              long(m.num_layers), long(m.hidden_size), long(m.num_heads), long(m.num_kv_heads), long(m.head_dim),
              long(m.intermediate_size), long(m.vocab_size));
  std::printf("context        %ld tokens\n", long(m.max_position_embeddings));
  for (const KvGroupInfo& g : m.kv_groups) {
    const std::string what = g.kind == "gqa" ? fmt::format("{} kv heads x {} x (K+V)", g.kv_heads, g.head_dim)
                                             : fmt::format("{} latent values", g.latent_dim);
    const std::string window = g.sliding_window ? fmt::format(", window {}", g.sliding_window) : "";
    std::printf("kv group       %-8s %2d layers, %s%s = %s per token\n", g.name.c_str(), g.num_layers, what.c_str(),
                window.c_str(), human_bytes(double(g.bytes_per_token)).c_str());
  }
  std::printf("kv per token   %s (%s); full multi-head attention would need %s (%.1fx)\n",
              human_bytes(double(m.kv_bytes_per_token)).c_str(), o.kv_dtype.c_str(),
              human_bytes(double(m.mha_kv_bytes_per_token)).c_str(),
              double(m.mha_kv_bytes_per_token) / double(m.kv_bytes_per_token));
  if (!m.retrofit_file.empty())
    std::printf("retrofit       %s: kv per token %s with it, %s without (%.2fx smaller)\n", m.retrofit_file.c_str(),
                human_bytes(double(m.kv_bytes_per_token)).c_str(),
                human_bytes(double(m.kv_bytes_per_token_without_retrofit)).c_str(),
                double(m.kv_bytes_per_token_without_retrofit) / double(m.kv_bytes_per_token));
  if (!m.retrofit_summary.empty()) std::printf("               %s\n", m.retrofit_summary.c_str());
  const int64_t context = o.context > 0 ? o.context : m.max_position_embeddings;
  const KvFootprint f = kv_footprint(m, context, o.block_size, o.max_num_batched_tokens);
  print_kv_at_context(m, f, o.max_num_batched_tokens);
  if (!m.has_weights) {
    std::printf("memory         %s KV for %ld tokens (no weights to add)\n", human_bytes(double(f.bytes)).c_str(),
                long(context));
    return;
  }
  std::printf("memory         %s weights + %s KV for %ld tokens = %s\n", human_bytes(double(m.weight_bytes)).c_str(),
              human_bytes(double(f.bytes)).c_str(), long(context),
              human_bytes(double(m.weight_bytes) + double(f.bytes)).c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model folder: architecture, size, KV cost per token");
  cmd->add_option("-m,--model", o->model_dir, "Hugging Face model folder")->capture_default_str();
  cmd->add_option("--context", o->context, "Tokens of context to size the memory for (default: the model's)");
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype")->check(CLI::IsMember({"bf16", "f32", "fp8"}))->capture_default_str();
  cmd->add_option("--retrofit", o->retrofit_file, "A retrofit's safetensors file (MLA-lite, DSA-lite): its KV layout");
  cmd->add_option("--block-size", o->block_size, "Tokens per KV block")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens,
                  "Tokens per step: a sliding-window group holds its window plus one step")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->callback([o] { run_inspect(*o); });
}

}  // namespace drift::cli
