// drift inspect: what a model folder holds and what serving it costs, without loading the weights.
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

void run_inspect(const InspectOptions& o) {
  auto info = inspect_model(o.model_dir, o.kv_dtype);
  if (!info.ok()) return fail(info.status().to_string());
  const ModelInfo& m = *info;
  std::printf("model          %s\n", o.model_dir.c_str());
  std::printf("architecture   %s (model_type %s)\n", m.architecture.c_str(), m.model_type.c_str());
  std::printf("parameters     %s (%s of weights)\n", fmt::format("{:L}", m.num_parameters).c_str(),
              human_bytes(double(m.weight_bytes)).c_str());
  std::string dtypes;
  for (const auto& [name, count] : m.parameters_by_dtype)
    dtypes += fmt::format("{}{} {:.1f}%", dtypes.empty() ? "" : ", ", name, 100.0 * double(count) / double(m.num_parameters));
  std::printf("stored dtypes  %s\n", dtypes.c_str());
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
  const int64_t context = o.context > 0 ? o.context : m.max_position_embeddings;
  std::printf("memory         %s weights + %s KV for %ld tokens = %s\n", human_bytes(double(m.weight_bytes)).c_str(),
              human_bytes(double(m.kv_bytes_per_token * context)).c_str(), long(context),
              human_bytes(double(m.weight_bytes) + double(m.kv_bytes_per_token * context)).c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model folder: architecture, size, KV cost per token");
  cmd->add_option("-m,--model", o->model_dir, "Hugging Face model folder")->capture_default_str();
  cmd->add_option("--context", o->context, "Tokens of context to size the memory for (default: the model's)");
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype")->check(CLI::IsMember({"bf16", "f32", "fp8"}))->capture_default_str();
  cmd->callback([o] { run_inspect(*o); });
}

}  // namespace drift::cli
