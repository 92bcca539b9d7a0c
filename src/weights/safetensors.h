// safetensors files, read in place through a memory map: `[u64 LE header_len][JSON header][data]`.
// Opening validates the whole header (dtypes, shapes, offsets inside the data, sizes, no overlaps), so a
// TensorInfo that comes out of here can be trusted to describe exactly the bytes it points at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "base/dtype.h"
#include "base/mapped_file.h"
#include "drift/status.h"

namespace drift::weights {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;        // outermost first, as stored
  std::span<const std::byte> bytes;  // points into the mapped file; valid while the file stays open
  std::string file;                  // path, for error messages
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static Expected<SafetensorsFile> open(const std::string& path);

  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // Sorted.
  std::vector<std::string> names() const;
  size_t num_tensors() const { return tensors_.size(); }
  // The `__metadata__` object, e.g. {"format": "pt"}.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: name, dtype, shape, and its bytes (row-major, little-endian).
using TensorToWrite = std::tuple<std::string, DType, std::vector<int64_t>, std::vector<std::byte>>;

// Writes a valid safetensors file (used by tests and tools: random-weight models, the base of bad-input
// fixtures). Tensors are laid out in the order given; the data starts on an 8-byte boundary, as the
// Python writer does, so fp32/fp64 tensors are aligned in the map.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// "[704, 64]"
std::string format_shape(std::span<const int64_t> shape);

}  // namespace drift::weights
