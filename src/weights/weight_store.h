// WeightStore: every tensor of a Hugging Face model folder, by name, read in place from its safetensors
// files. Which files: model.safetensors; else the shards named by model.safetensors.index.json; else every
// *.safetensors in the folder.
#pragma once

#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"
#include "weights/safetensors.h"

namespace drift::weights {

class WeightStore {
 public:
  static Expected<WeightStore> open(const std::string& model_dir);
  // Adds the tensors of one more safetensors file, such as retrofit weights or a draft head kept beside a
  // model. A name the store already holds is an error naming both files.
  Status add_file(const std::string& path);

  bool contains(std::string_view name) const;
  // Missing: "tensor 'x' not found in <dir> (N tensors; did you mean 'y'?)".
  Expected<const TensorInfo*> get(std::string_view name) const;
  // Also checks the shape: "tensor 'x' in <file> has shape [a, b], expected [c, d]".
  Expected<const TensorInfo*> get(std::string_view name, std::span<const int64_t> expected_shape) const;
  Expected<const TensorInfo*> get(std::string_view name, std::initializer_list<int64_t> expected_shape) const {
    return get(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()));
  }

  // Sorted.
  std::vector<std::string> names() const;
  size_t num_tensors() const { return tensors_.size(); }
  const std::string& dir() const { return dir_; }
  // The files the tensors come from, in the order they were opened.
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  // Points into files_: each TensorInfo sits in a node of its file's std::map, which moving the file (or
  // this store) never relocates.
  std::map<std::string, const TensorInfo*, std::less<>> tensors_;
};

}  // namespace drift::weights
