#include "weights/weight_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "base/mapped_file.h"

namespace drift::weights {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Levenshtein distance, or nullopt once it must exceed `limit` (most names in a big checkpoint differ
// from a typo by far more than the best candidate, so they are dropped after a row or two).
std::optional<size_t> edit_distance(std::string_view a, std::string_view b, size_t limit) {
  const size_t len_diff = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (len_diff > limit) return std::nullopt;
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    size_t row_min = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
      row_min = std::min(row_min, row[j]);
    }
    if (row_min > limit) return std::nullopt;
  }
  if (row[b.size()] > limit) return std::nullopt;
  return row[b.size()];
}

// The nearest known name, if one is close enough to be a plausible typo or naming-scheme slip.
std::optional<std::string_view> closest_name(std::string_view name,
                                             const std::map<std::string, const TensorInfo*, std::less<>>& tensors) {
  size_t best_distance = std::max<size_t>(name.size() / 3, 3);
  std::optional<std::string_view> best;
  for (const auto& [candidate, info] : tensors) {
    const std::optional<size_t> d = edit_distance(name, candidate, best_distance);
    if (d && (!best || *d < best_distance)) {
      best_distance = *d;
      best = candidate;
    }
  }
  return best;
}

Expected<json> read_json(const std::string& path) {
  DRIFT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  const auto* text = reinterpret_cast<const char*>(file.bytes().data());
  try {
    return json::parse(text, text + file.bytes().size());
  } catch (const json::exception& e) {
    return data_loss(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
}

// The shard file per tensor from model.safetensors.index.json, in the file's own order of first mention.
struct ShardIndex {
  std::vector<std::string> shards;
  std::vector<std::pair<std::string, std::string>> tensor_to_shard;
};

Expected<ShardIndex> read_shard_index(const std::string& index_path) {
  DRIFT_ASSIGN_OR_RETURN(json index, read_json(index_path));
  if (!index.is_object()) return data_loss(index_path + ": not a JSON object");
  const auto map_it = index.find("weight_map");
  if (map_it == index.end()) return data_loss(index_path + ": missing 'weight_map'");
  if (!map_it->is_object()) return data_loss(index_path + ": 'weight_map' is not an object");
  ShardIndex out;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string())
      return data_loss(fmt::format("{}: weight_map entry for tensor '{}' is not a file name", index_path, tensor));
    const std::string shard_name = shard.get<std::string>();
    if (std::find(out.shards.begin(), out.shards.end(), shard_name) == out.shards.end())
      out.shards.push_back(shard_name);
    out.tensor_to_shard.emplace_back(tensor, shard_name);
  }
  return out;
}

}  // namespace

Expected<WeightStore> WeightStore::open(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) return not_found(fmt::format("model folder {} does not exist", model_dir));
  const fs::path dir(model_dir);
  WeightStore store;
  store.dir_ = model_dir;

  const fs::path single = dir / "model.safetensors";
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    DRIFT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(single.string()));
    store.files_.push_back(std::move(file));
    for (const std::string& name : store.files_[0].names()) store.tensors_.emplace(name, store.files_[0].find(name));
    return store;
  }

  if (fs::exists(index_path, ec)) {
    DRIFT_ASSIGN_OR_RETURN(ShardIndex index, read_shard_index(index_path.string()));
    std::map<std::string, size_t> shard_slot;
    for (const std::string& shard : index.shards) {
      const fs::path shard_path = dir / shard;
      if (!fs::exists(shard_path, ec)) {
        const auto first_tensor = std::find_if(index.tensor_to_shard.begin(), index.tensor_to_shard.end(),
                                               [&](const auto& entry) { return entry.second == shard; });
        return not_found(fmt::format("{} maps tensor '{}' to shard '{}', which is missing from {}", index_path.string(),
                                     first_tensor->first, shard, model_dir));
      }
      DRIFT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(shard_path.string()));
      shard_slot.emplace(shard, store.files_.size());
      store.files_.push_back(std::move(file));
    }
    // The index is the authority on names: a tensor it maps must be in that shard, and one it does not map
    // is not part of the model (as in transformers).
    for (const auto& [tensor, shard] : index.tensor_to_shard) {
      const SafetensorsFile& file = store.files_[shard_slot.at(shard)];
      const TensorInfo* info = file.find(tensor);
      if (!info)
        return data_loss(fmt::format("{} maps tensor '{}' to {}, which does not contain it", index_path.string(),
                                     tensor, file.path()));
      store.tensors_.emplace(tensor, info);
    }
    return store;
  }

  std::vector<fs::path> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") paths.push_back(entry.path());
  if (ec) return io_error(fmt::format("cannot list {}: {}", model_dir, ec.message()));
  if (paths.empty())
    return not_found(
        fmt::format("no weights in {} (looked for model.safetensors, model.safetensors.index.json and "
                    "*.safetensors)",
                    model_dir));
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    DRIFT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path.string()));
    store.files_.push_back(std::move(file));
  }
  for (const SafetensorsFile& file : store.files_) {
    for (const std::string& name : file.names()) {
      const auto [it, inserted] = store.tensors_.emplace(name, file.find(name));
      if (!inserted)
        return data_loss(fmt::format("tensor '{}' is in both {} and {}", name, it->second->file, file.path()));
    }
  }
  return store;
}

Status WeightStore::add_file(const std::string& path) {
  DRIFT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  for (const std::string& name : file.names())
    if (const auto it = tensors_.find(name); it != tensors_.end())
      return invalid_argument(fmt::format("tensor '{}' of {} is already in {}", name, path, it->second->file));
  files_.push_back(std::move(file));
  const SafetensorsFile& added = files_.back();
  for (const std::string& name : added.names()) tensors_.emplace(name, added.find(name));
  return Status::Ok();
}

bool WeightStore::contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

Expected<const TensorInfo*> WeightStore::get(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  const std::optional<std::string_view> suggestion = closest_name(name, tensors_);
  return not_found(fmt::format("tensor '{}' not found in {} ({} tensors{})", name, dir_, tensors_.size(),
                               suggestion ? fmt::format("; did you mean '{}'?", *suggestion) : std::string()));
}

Expected<const TensorInfo*> WeightStore::get(std::string_view name, std::span<const int64_t> expected_shape) const {
  DRIFT_ASSIGN_OR_RETURN(const TensorInfo* info, get(name));
  if (!std::equal(info->shape.begin(), info->shape.end(), expected_shape.begin(), expected_shape.end()))
    return invalid_argument(fmt::format("tensor '{}' in {} has shape {}, expected {}", name, info->file,
                                        format_shape(info->shape), format_shape(expected_shape)));
  return info;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

}  // namespace drift::weights
