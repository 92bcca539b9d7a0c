#include "model_copy.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "weights/safetensors.h"

namespace drift::testing {

namespace {

namespace fs = std::filesystem;

// One quiet NaN in each floating dtype the fixtures use.
std::vector<std::byte> nan_bytes(DType dtype, int64_t numel) {
  std::vector<std::byte> out;
  auto fill = [&](const void* one, size_t size) {
    out.resize(size_t(numel) * size);
    for (int64_t i = 0; i < numel; ++i) std::memcpy(out.data() + size_t(i) * size, one, size);
  };
  const uint32_t f32 = 0x7fc00000u;
  const uint16_t half = dtype == DType::kBF16 ? uint16_t(0x7fc0) : uint16_t(0x7e00);
  if (dtype == DType::kF32) {
    fill(&f32, 4);
  } else if (dtype == DType::kBF16 || dtype == DType::kF16) {
    fill(&half, 2);
  } else {
    throw std::runtime_error("copy_model: cannot write NaN into a " + std::string(dtype_name(dtype)) + " tensor");
  }
  return out;
}

// What a tensor of the file becomes: appended to `out` (none, itself, or several tensors).
using FileEdit = std::function<void(const weights::TensorInfo&, std::vector<weights::TensorToWrite>& out)>;

// Rewrites the file tensor by tensor; returns what it wrote.
std::vector<weights::TensorToWrite> rewrite_file(const fs::path& file, const FileEdit& edit) {
  std::vector<weights::TensorToWrite> tensors;
  {
    auto f = weights::SafetensorsFile::open(file.string());
    if (!f.ok()) throw std::runtime_error(f.status().to_string());
    for (const std::string& name : f->names()) edit(*f->find(name), tensors);
  }
  if (Status s = weights::write_safetensors(file.string(), tensors, {{"format", "pt"}}); !s.ok())
    throw std::runtime_error(s.to_string());
  return tensors;
}

// New bytes for a tensor, or nullopt to keep it.
using TensorEdit = std::function<std::optional<std::vector<std::byte>>(const weights::TensorInfo&)>;

void rewrite_tensors(const fs::path& file, const TensorEdit& edit) {
  rewrite_file(file, [&](const weights::TensorInfo& t, std::vector<weights::TensorToWrite>& out) {
    std::optional<std::vector<std::byte>> bytes = edit(t);
    out.emplace_back(t.name, t.dtype, t.shape, bytes ? std::move(*bytes) : std::vector<std::byte>(t.bytes.begin(), t.bytes.end()));
  });
}

// Every weights file of the folder (not the golden outputs).
std::vector<fs::path> weight_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors" && entry.path().filename() != "golden.safetensors")
      files.push_back(entry.path());
  return files;
}

uint16_t bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
}

}  // namespace

std::string fresh_temp_dir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  const fs::path dir = fs::temp_directory_path() / (prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::create_directories(dir);
  static struct Cleanup {
    std::vector<fs::path> roots;
    ~Cleanup() {
      std::error_code ec;
      for (const fs::path& p : roots) fs::remove_all(p, ec);
    }
  } cleanup;
  cleanup.roots.push_back(dir);
  return dir.string();
}

std::string copy_model(const std::string& model_dir, const std::vector<std::string>& nan_tensors,
                       const JsonPatches& patches) {
  const fs::path dir = fs::path(fresh_temp_dir("drift-model-copy")) / fs::path(model_dir).filename();
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(model_dir))
    fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  if (!nan_tensors.empty())
    for (const fs::path& file : weight_files(dir))
      rewrite_tensors(file, [&](const weights::TensorInfo& t) -> std::optional<std::vector<std::byte>> {
        if (std::find(nan_tensors.begin(), nan_tensors.end(), t.name) == nan_tensors.end()) return std::nullopt;
        return nan_bytes(t.dtype, t.numel());
      });
  for (const auto& [file, patch] : patches) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / file));
    j.merge_patch(patch);
    std::ofstream(dir / file) << j.dump(2);
  }
  return dir.string();
}

std::string copy_model_with_template(const std::string& model_dir, const std::string& chat_template) {
  const std::string dir = copy_model(model_dir, {});
  std::ofstream(fs::path(dir) / "chat_template.jinja") << chat_template;
  return dir;
}

std::string copy_model_with_harmony_tokens(const std::string& model_dir, const JsonPatches& patches) {
  const std::string dir = copy_model(model_dir, {}, patches);
  const fs::path path = fs::path(dir) / "tokenizer.json";
  nlohmann::json tokenizer = nlohmann::json::parse(std::ifstream(path));
  int next_id = int(tokenizer["model"]["vocab"].size());
  for (const auto& added : tokenizer["added_tokens"]) next_id = std::max(next_id, added["id"].get<int>() + 1);
  for (const char* token : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"})
    tokenizer["added_tokens"].push_back({{"id", next_id++}, {"content", token}, {"single_word", false}, {"lstrip", false},
                                         {"rstrip", false}, {"normalized", false}, {"special", true}});
  std::ofstream(path) << tokenizer.dump();
  return dir;
}

void fill_bf16_matrix(const std::string& model_dir, const std::string& tensor,
                      const std::function<float(int64_t row, int64_t column)>& value) {
  for (const fs::path& file : weight_files(model_dir))
    rewrite_tensors(file, [&](const weights::TensorInfo& t) -> std::optional<std::vector<std::byte>> {
      if (t.name != tensor) return std::nullopt;
      if (t.dtype != DType::kBF16 || t.shape.size() != 2)
        throw std::runtime_error("fill_bf16_matrix: " + tensor + " is not a bf16 matrix");
      std::vector<std::byte> bytes(size_t(t.numel()) * 2);
      for (int64_t r = 0; r < t.shape[0]; ++r)
        for (int64_t c = 0; c < t.shape[1]; ++c) {
          const uint16_t bits = bf16_bits(value(r, c));
          std::memcpy(bytes.data() + size_t(r * t.shape[1] + c) * 2, &bits, 2);
        }
      return bytes;
    });
}

namespace {

// One tensor of quantize_fp8_blocks: its codes (or decoded values) and the block scales.
void append_fp8_blocks(const weights::TensorInfo& t, int64_t block_rows, int64_t block_cols, bool decoded,
                       std::vector<weights::TensorToWrite>& out) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int64_t scale_rows = (rows + block_rows - 1) / block_rows, scale_cols = (cols + block_cols - 1) / block_cols;
  std::vector<float> values(size_t(t.numel())), scales(size_t(scale_rows * scale_cols), 0.0f);
  convert_to_f32(t.bytes.data(), t.dtype, values.data(), values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& s = scales[size_t((r / block_rows) * scale_cols + c / block_cols)];
      s = std::max(s, std::abs(values[size_t(r * cols + c)]) / 448.0f);
    }
  std::vector<std::byte> codes(values.size()), fp32(values.size() * 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const float s = scales[size_t((r / block_rows) * scale_cols + c / block_cols)];
      const uint8_t code = s > 0.0f ? f32_to_f8e4m3(values[i] / s) : uint8_t(0);
      const float value = f8e4m3_to_f32(code) * s;
      codes[i] = std::byte(code);
      std::memcpy(fp32.data() + i * 4, &value, 4);
    }
  if (decoded) {
    out.emplace_back(t.name, DType::kF32, t.shape, std::move(fp32));
    return;
  }
  out.emplace_back(t.name, DType::kF8E4M3, t.shape, std::move(codes));
  std::vector<std::byte> scale_bytes(scales.size() * 4);
  std::memcpy(scale_bytes.data(), scales.data(), scale_bytes.size());
  out.emplace_back(t.name + "_scale_inv", DType::kF32, std::vector<int64_t>{scale_rows, scale_cols}, std::move(scale_bytes));
}

}  // namespace

void quantize_fp8_blocks(const std::string& model_dir, const std::function<bool(const std::string&)>& pick,
                         int64_t block_rows, int64_t block_cols, bool decoded) {
  for (const fs::path& file : weight_files(model_dir)) {
    const std::vector<weights::TensorToWrite> tensors =
        rewrite_file(file, [&](const weights::TensorInfo& t, std::vector<weights::TensorToWrite>& out) {
          if (pick(t.name) && t.shape.size() == 2 && is_float(t.dtype))
            append_fp8_blocks(t, block_rows, block_cols, decoded, out);
          else
            out.emplace_back(t.name, t.dtype, t.shape, std::vector<std::byte>(t.bytes.begin(), t.bytes.end()));
        });
    // A sharded folder's index names the file of every tensor, the new scales included.
    const fs::path index = fs::path(model_dir) / "model.safetensors.index.json";
    if (!fs::exists(index)) continue;
    nlohmann::json j = nlohmann::json::parse(std::ifstream(index));
    for (const weights::TensorToWrite& t : tensors) j["weight_map"][std::get<0>(t)] = file.filename().string();
    std::ofstream(index) << j.dump(2);
  }
}

}  // namespace drift::testing
