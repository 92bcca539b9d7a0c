#include "weights/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

namespace drift::weights {

namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors lengths and data are little-endian");

// The reference implementation refuses larger headers; a bigger length means a corrupt or foreign file.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

// Names newer safetensors versions define that DType has no entry for yet: reported as unsupported
// rather than unknown, so the message says the file is fine and this build is not.
constexpr std::string_view kKnownUnsupportedDtypes[] = {"F8_E8M0",     "F4",          "F6_E2M3", "F6_E3M2",
                                                        "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"};

// Element count times element size, or nullopt when it does not fit in 64 bits.
std::optional<uint64_t> checked_nbytes(std::span<const int64_t> shape, DType dtype) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d)) return std::nullopt;
    n *= uint64_t(d);
  }
  return n;
}

// A JSON number that is a whole, non-negative value below 2^63.
std::optional<int64_t> as_size(const json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t u = v.get<uint64_t>();
  if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return int64_t(u);
}

struct ByteRange {
  uint64_t begin, end;
  const std::string* name;
};

Expected<TensorInfo> parse_entry(const std::string& path, const std::string& name, const json& entry,
                                 std::span<const std::byte> data) {
  const auto where = [&] { return fmt::format("tensor '{}' in {}", name, path); };
  if (!entry.is_object()) return data_loss(where() + ": header entry is not an object");

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return data_loss(where() + ": header entry has no 'dtype'");
  if (!dtype_it->is_string()) return data_loss(where() + ": 'dtype' is not a string");
  const std::string dtype_str = dtype_it->get<std::string>();
  const std::optional<DType> dtype = parse_safetensors_dtype(dtype_str);
  if (!dtype) {
    const bool known = std::find(std::begin(kKnownUnsupportedDtypes), std::end(kKnownUnsupportedDtypes), dtype_str) !=
                       std::end(kKnownUnsupportedDtypes);
    return unsupported(fmt::format("{} has {} dtype '{}'", where(), known ? "unsupported" : "unknown", dtype_str));
  }

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return data_loss(where() + ": header entry has no 'shape'");
  if (!shape_it->is_array()) return data_loss(where() + ": 'shape' is not a list");
  std::vector<int64_t> shape;
  for (const json& d : *shape_it) {
    const std::optional<int64_t> dim = as_size(d);
    if (!dim)
      return data_loss(
          fmt::format("{}: shape {} has an entry that is not a non-negative integer", where(), shape_it->dump()));
    shape.push_back(*dim);
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) return data_loss(where() + ": header entry has no 'data_offsets'");
  const json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2 || !as_size(offsets[0]) || !as_size(offsets[1]))
    return data_loss(
        fmt::format("{}: data_offsets {} is not a pair of non-negative integers", where(), offsets.dump()));
  const uint64_t begin = uint64_t(*as_size(offsets[0]));
  const uint64_t end = uint64_t(*as_size(offsets[1]));
  if (begin > end)
    return data_loss(fmt::format("{}: data_offsets [{}, {}] end before they begin", where(), begin, end));
  if (end > data.size())
    return data_loss(fmt::format("{}: data_offsets [{}, {}] run past the end of the data ({} bytes)", where(), begin,
                                 end, data.size()));

  const std::optional<uint64_t> needed = checked_nbytes(shape, *dtype);
  if (!needed) return data_loss(fmt::format("{}: shape {} is too large", where(), format_shape(shape)));
  if (end - begin != *needed)
    return data_loss(fmt::format("{}: data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {} bytes", where(),
                                 begin, end, end - begin, format_shape(shape), dtype_str, *needed));

  TensorInfo info;
  info.name = name;
  info.dtype = *dtype;
  info.shape = std::move(shape);
  info.bytes = data.subspan(begin, end - begin);
  info.file = path;
  return info;
}

Status parse_metadata(const std::string& path, const json& value, std::map<std::string, std::string>& out) {
  if (!value.is_object()) return data_loss(path + ": __metadata__ is not an object");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) return data_loss(fmt::format("{}: __metadata__ value '{}' is not a string", path, key));
    out.emplace(key, v.get<std::string>());
  }
  return Status::Ok();
}

// Two tensors sharing bytes would alias silently; zero-size tensors own no bytes and may sit anywhere.
// Gaps between tensors are allowed: they waste space but cannot make a tensor read the wrong bytes.
Status check_no_overlap(const std::string& path, std::vector<ByteRange> spans) {
  std::erase_if(spans, [](const ByteRange& s) { return s.begin == s.end; });
  std::sort(spans.begin(), spans.end(), [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    const ByteRange& prev = spans[i - 1];
    const ByteRange& cur = spans[i];
    if (cur.begin < prev.end)
      return data_loss(fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] in {} overlap", *prev.name, prev.begin,
                                   prev.end, *cur.name, cur.begin, cur.end, path));
  }
  return Status::Ok();
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string format_shape(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Expected<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  DRIFT_ASSIGN_OR_RETURN(file.file_, MappedFile::open(path));
  const std::span<const std::byte> bytes = file.file_.bytes();
  if (bytes.size() < 8)
    return data_loss(
        fmt::format("{}: file is {} bytes, too short for the 8-byte safetensors header length", path, bytes.size()));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8)
    return data_loss(
        fmt::format("{}: header length {} runs past the end of the file ({} bytes)", path, header_len, bytes.size()));
  if (header_len > kMaxHeaderBytes)
    return data_loss(fmt::format("{}: header length {} is over the {} byte limit", path, header_len, kMaxHeaderBytes));

  const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {
    return data_loss(fmt::format("{}: header is not valid JSON ({})", path, e.what()));
  }
  if (!header.is_object()) return data_loss(path + ": header is not a JSON object");

  const std::span<const std::byte> data = bytes.subspan(8 + header_len);
  std::vector<ByteRange> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      DRIFT_RETURN_IF_ERROR(parse_metadata(path, entry, file.metadata_));
      continue;
    }
    DRIFT_ASSIGN_OR_RETURN(TensorInfo info, parse_entry(path, name, entry, data));
    const auto it = file.tensors_.emplace(name, std::move(info)).first;
    const uint64_t begin = uint64_t(it->second.bytes.data() - data.data());
    spans.push_back({begin, begin + it->second.bytes.size(), &it->first});
  }
  DRIFT_RETURN_IF_ERROR(check_no_overlap(path, std::move(spans)));
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& [name, dtype, shape, data] : tensors) {
    if (name.empty() || name == "__metadata__")
      return invalid_argument(fmt::format("write_safetensors {}: '{}' is not a usable tensor name", path, name));
    if (!seen.insert(name).second)
      return invalid_argument(fmt::format("write_safetensors {}: tensor '{}' is given twice", path, name));
    for (int64_t d : shape)
      if (d < 0)
        return invalid_argument(
            fmt::format("write_safetensors {}: tensor '{}' has negative shape {}", path, name, format_shape(shape)));
    const std::optional<uint64_t> needed = checked_nbytes(shape, dtype);
    if (!needed || *needed != data.size())
      return invalid_argument(fmt::format("write_safetensors {}: tensor '{}' has {} bytes, but shape {} of {} needs {}",
                                          path, name, data.size(), format_shape(shape), dtype_name(dtype),
                                          needed ? fmt::to_string(*needed) : std::string("more than 2^64")));
    header[name] = {
        {"dtype", std::string(dtype_name(dtype))}, {"shape", shape}, {"data_offsets", {offset, offset + data.size()}}};
    offset += data.size();
  }

  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(fmt::format("write_safetensors {}: cannot open for writing", path));
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& t : tensors) {
    const std::vector<std::byte>& data = std::get<3>(t);
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  }
  out.close();
  if (!out) return io_error(fmt::format("write_safetensors {}: write failed", path));
  return Status::Ok();
}

}  // namespace drift::weights
