// drift inspect: what a model folder holds and what serving it costs, without loading the weights.
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "commands.h"
#include "model/registry.h"
#include "weights/model_config.h"
#include "weights/weight_store.h"

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
  auto config = weights::load_model_config(o.model_dir);
  if (!config.ok()) return fail(config.status().to_string());
  auto store = weights::WeightStore::open(o.model_dir);
  if (!store.ok()) return fail(store.status().to_string());
  int64_t num_params = 0;
  size_t weight_bytes = 0;
  std::map<std::string, int64_t> dtype_counts;
  for (const std::string& name : store->names()) {
    const weights::TensorInfo* t = *store->get(name);
    num_params += t->numel();
    weight_bytes += t->bytes.size();
    dtype_counts[std::string(dtype_name(t->dtype))] += t->numel();
  }
  const auto& c = *config;
  std::printf("model          %s\n", o.model_dir.c_str());
  std::printf("architecture   %s (model_type %s)\n", c.architecture.c_str(), c.model_type.c_str());
  std::printf("parameters     %s (%s of weights)\n", fmt::format("{:L}", num_params).c_str(), human_bytes(double(weight_bytes)).c_str());
  std::string dtypes;
  for (const auto& [name, count] : dtype_counts) dtypes += fmt::format("{}{} {:.1f}%", dtypes.empty() ? "" : ", ", name, 100.0 * double(count) / double(num_params));
  std::printf("stored dtypes  %s\n", dtypes.c_str());
  std::printf("shape          %ld layers, hidden %ld, heads %ld (kv %ld), head_dim %ld, ffn %ld, vocab %ld\n",
              long(c.num_layers), long(c.hidden_size), long(c.num_heads), long(c.num_kv_heads), long(c.head_dim),
              long(c.intermediate_size), long(c.vocab_size));
  std::printf("context        %ld tokens\n", long(c.max_position_embeddings));

  const DType kv_dtype = o.kv_dtype == "f32" ? DType::kF32 : DType::kBF16;
  auto layout = model::kv_layout(c, kv_dtype);
  if (!layout.ok()) return fail(layout.status().to_string());
  int64_t per_token = 0;
  for (const core::KvSpec& g : *layout) {
    const int64_t bytes = g.bytes_per_token_per_layer() * g.num_layers;
    per_token += bytes;
    const std::string what = g.kind == core::KvKind::kGqa
                                 ? fmt::format("{} kv heads x {} x (K+V)", g.kv_heads, g.head_dim)
                                 : fmt::format("{} latent values", g.latent_dim);
    const std::string window = g.sliding_window ? fmt::format(", window {}", g.sliding_window) : "";
    std::printf("kv group       %-8s %2d layers, %s%s = %s per token\n", g.name.c_str(), g.num_layers, what.c_str(),
                window.c_str(), human_bytes(double(bytes)).c_str());
  }
  // The equivalent multi-head cache (K and V for every query head) shows what GQA or MLA saves.
  const int64_t value_head_dim = c.mla ? c.mla->v_head_dim : c.head_dim;
  const int64_t mha = (c.num_heads * c.head_dim + c.num_heads * value_head_dim) * c.num_layers * int64_t(dtype_size(kv_dtype));
  std::printf("kv per token   %s (%s); full multi-head attention would need %s (%.1fx)\n",
              human_bytes(double(per_token)).c_str(), o.kv_dtype.c_str(), human_bytes(double(mha)).c_str(),
              double(mha) / double(per_token));
  const int64_t context = o.context > 0 ? o.context : c.max_position_embeddings;
  std::printf("memory         %s weights + %s KV for %ld tokens = %s\n", human_bytes(double(weight_bytes)).c_str(),
              human_bytes(double(per_token * context)).c_str(), long(context),
              human_bytes(double(weight_bytes) + double(per_token * context)).c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model folder: architecture, size, KV cost per token");
  cmd->add_option("-m,--model", o->model_dir, "Hugging Face model folder")->capture_default_str();
  cmd->add_option("--context", o->context, "Tokens of context to size the memory for (default: the model's)");
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype")->check(CLI::IsMember({"bf16", "f32"}))->capture_default_str();
  cmd->callback([o] { run_inspect(*o); });
}

}  // namespace drift::cli
