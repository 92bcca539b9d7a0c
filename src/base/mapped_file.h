// A read-only memory map of a whole file (weights are read in place, never copied whole into memory).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "drift/status.h"

namespace drift {

class MappedFile {
 public:
  static Expected<MappedFile> open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace drift
