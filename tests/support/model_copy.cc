#include "model_copy.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
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

void rewrite_with_nans(const fs::path& file, const std::vector<std::string>& nan_tensors) {
  std::vector<weights::TensorToWrite> tensors;
  {
    auto f = weights::SafetensorsFile::open(file.string());
    if (!f.ok()) throw std::runtime_error(f.status().to_string());
    for (const std::string& name : f->names()) {
      const weights::TensorInfo* t = f->find(name);
      const bool poison = std::find(nan_tensors.begin(), nan_tensors.end(), name) != nan_tensors.end();
      tensors.emplace_back(name, t->dtype, t->shape,
                           poison ? nan_bytes(t->dtype, t->numel()) : std::vector<std::byte>(t->bytes.begin(), t->bytes.end()));
    }
  }
  if (Status s = weights::write_safetensors(file.string(), tensors, {{"format", "pt"}}); !s.ok())
    throw std::runtime_error(s.to_string());
}

}  // namespace

std::string copy_model(const std::string& model_dir, const std::vector<std::string>& nan_tensors,
                       const JsonPatches& patches) {
  static std::atomic<int> counter{0};
  const fs::path dir = fs::temp_directory_path() /
                       ("drift-model-copy-" + std::to_string(getpid()) + "-" + std::to_string(counter++)) /
                       fs::path(model_dir).filename();
  fs::create_directories(dir);
  static struct Cleanup {
    std::vector<fs::path> roots;
    ~Cleanup() {
      std::error_code ec;
      for (const fs::path& p : roots) fs::remove_all(p, ec);
    }
  } cleanup;
  cleanup.roots.push_back(dir.parent_path());
  for (const auto& entry : fs::directory_iterator(model_dir))
    fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  if (!nan_tensors.empty())
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".safetensors" && entry.path().filename() != "golden.safetensors")
        rewrite_with_nans(entry.path(), nan_tensors);
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

}  // namespace drift::testing
