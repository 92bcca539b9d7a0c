// WeightLoader: fetches a named weight with its expected shape and places it on the backend in the
// backend's compute dtype, converting once at load (bf16/fp16/fp8 -> fp32 on the CPU), or as stored for
// kernels that read a quantized format themselves. It can read one rank's share of a tensor (tensor
// parallelism reads only its part). The source is a Hugging Face folder (plus any extra safetensors
// files opened beside it), or seeded random numbers so any config.json can be benchmarked without weights.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "weights/weight_store.h"

namespace drift::model {

// A rank's share of a tensor split along one dimension: part `rank` of `world` equal parts.
struct Shard {
  int32_t dim = 0;
  int32_t rank = 0, world = 1;
  // The part's size along `dim` once zeros are appended to it (a kernel's width multiple), or 0: no padding.
  int64_t padded_to = 0;
  bool whole() const { return world == 1 && padded_to == 0; }
  // The part's size along `dim` of a tensor `size` long there, padding included.
  int64_t part_size(int64_t size) const { return padded_to > 0 ? padded_to : size / world; }
};

// This rank's share of a tensor-parallel model: a layer spec keeps the checkpoint's whole sizes (what the
// loader reads) and asks its split for the part it computes.
struct TensorSplit {
  int32_t rank = 0, world = 1;
  int64_t part(int64_t whole) const { return whole / world; }
  Shard along(int32_t dim) const { return {.dim = dim, .rank = rank, .world = world}; }
};

class WeightLoader {
 public:
  static WeightLoader from_store(const weights::WeightStore& store, backend::Ops& ops);
  // Normal(0, std) weights; names ending in "norm.weight" get 1 + Normal(0, std).
  static WeightLoader random(uint64_t seed, float std, backend::Ops& ops);

  bool has(const std::string& name) const;
  Expected<backend::Buffer> load(const std::string& name, std::vector<int64_t> shape);
  // The rank's share of a tensor whose whole shape is `shape`: the result has shard.part_size(shape[dim]) there.
  Expected<backend::Buffer> load(const std::string& name, const std::vector<int64_t>& shape, const Shard& shard);
  // Several tensors stacked along dimension 0 into one buffer (e.g. gate and up into one matrix); with a
  // shard, each tensor's share (a column-split q/k/v keeps its part of each of the three).
  Expected<backend::Buffer> load_stacked(const std::vector<std::string>& names,
                                         const std::vector<std::vector<int64_t>>& shapes, const Shard& shard = {});
  // The same with a shard per tensor (a column-split q/k/v whose few kv heads are replicated: k and v are
  // split among fewer parts than q). Every shard splits the same dimension.
  Expected<backend::Buffer> load_stacked(const std::vector<std::string>& names,
                                         const std::vector<std::vector<int64_t>>& shapes,
                                         const std::vector<Shard>& shards);
  // The tensor's bytes as stored, in its stored dtype (checked against `dtype`), for kernels that read a
  // quantized format themselves (MXFP4 blocks and scales as U8, FP8 weights as F8E4M3). Random weights:
  // uniform bytes (U8 only).
  Expected<backend::Buffer> load_stored(const std::string& name, const std::vector<int64_t>& shape, DType dtype,
                                        const Shard& shard = {});
  // A tensor another rank holds whole (an expert placed there): not read, but counted among the model's
  // parameters and given its turn in the random draws, so every rank's weights are those one rank draws.
  void skip(const std::string& name, const std::vector<int64_t>& shape);
  // The weight as fp32 on the host, for layouts a model derives at load (MLA's absorbed projections).
  Expected<std::vector<float>> read_host(const std::string& name, const std::vector<int64_t>& shape,
                                         const Shard& shard = {});
  // The MXFP4 matrix "<name>_blocks" + "<name>_scales" of `shape` [..., rows, cols], decoded to fp32 on the host.
  Expected<std::vector<float>> read_host_mxfp4(const std::string& name, const std::vector<int64_t>& shape);
  // Host fp32 values of `shape` (1 to 4 dimensions) placed on the backend in its compute dtype.
  Expected<backend::Buffer> upload(const std::vector<float>& host, const std::vector<int64_t>& shape);
  // Reports bytes read so far out of `total` after each tensor.
  void set_progress(std::function<void(size_t, size_t)> progress, size_t total) {
    progress_ = std::move(progress);
    bytes_total_ = total;
  }
  // FP8 weights stored with block scales ("<name>_scale_inv", one per tile of this many rows and columns:
  // quantization_config.weight_block_size, DeepSeek-V3's and Qwen3-FP8's format) are decoded on the host as
  // code * scale. 128 x 128 unless the config says otherwise.
  void set_fp8_block(int64_t rows, int64_t cols) { fp8_block_ = {rows, cols}; }
  backend::Ops& ops() { return *ops_; }
  // Elements of every distinct tensor read so far, whole (the model's parameter count once it is built).
  int64_t num_parameters() const { return num_parameters_; }

 private:
  WeightLoader(const weights::WeightStore* store, uint64_t seed, float std, backend::Ops& ops)
      : store_(store), seed_(seed), std_(std), ops_(&ops) {}
  // Appends the weight (the shard's part of it) as fp32 to `out`.
  Status read_f32(const std::string& name, const std::vector<int64_t>& shape, const Shard& shard,
                  std::vector<float>& out);
  void count(const std::string& name, const std::vector<int64_t>& shape, size_t bytes_read);
  // dst (the shard's part of FP8 weight `name`, decoded codes) times its block scales.
  Status scale_fp8_blocks(const std::string& name, const std::vector<int64_t>& shape, const Shard& shard, float* dst);

  const weights::WeightStore* store_;
  uint64_t seed_;
  float std_;
  backend::Ops* ops_;
  size_t bytes_loaded_ = 0, bytes_total_ = 0;
  std::function<void(size_t, size_t)> progress_;
  uint64_t num_random_ = 0;
  // Staging reused from tensor to tensor (fresh pages cost more than the copies): fp32 values, then bf16.
  std::vector<float> host_;
  std::vector<uint16_t> bf16_;
  std::set<std::string> counted_;
  int64_t num_parameters_ = 0;
  std::array<int64_t, 2> fp8_block_ = {128, 128};
};

// The shard's part of `whole` (fp32 of `shape`), for layouts a model derives on the host before upload.
std::vector<float> shard_of(const std::vector<float>& whole, const std::vector<int64_t>& shape, const Shard& shard);

// A buffer of `shape` (1 to 4 dimensions) on `ops`.
Expected<backend::Buffer> alloc_shaped(backend::Ops& ops, DType dtype, const std::vector<int64_t>& shape);

}  // namespace drift::model
