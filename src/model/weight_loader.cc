#include "model/weight_loader.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "weights/mxfp4.h"

namespace drift::model {

namespace {

int64_t product(const std::vector<int64_t>& shape, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= shape[i];
  return n;
}

// Checks that the shard splits `shape` into equal parts, naming the tensor otherwise.
Status check_shard(const std::string& name, const std::vector<int64_t>& shape, const Shard& shard) {
  if (shard.whole()) return Status::Ok();
  if (shard.dim < 0 || size_t(shard.dim) >= shape.size() || shard.rank < 0 || shard.rank >= shard.world)
    return invalid_argument(fmt::format("tensor '{}' of shape [{}]: no dimension {} / rank {} of {} to split",
                                        name, fmt::join(shape, ", "), shard.dim, shard.rank, shard.world));
  if (shape[size_t(shard.dim)] % shard.world != 0)
    return invalid_argument(fmt::format("tensor '{}' of shape [{}] does not split into {} equal parts along dimension {}",
                                        name, fmt::join(shape, ", "), shard.world, shard.dim));
  if (shard.padded_to != 0 && shard.padded_to < shape[size_t(shard.dim)] / shard.world)
    return invalid_argument(fmt::format("tensor '{}' of shape [{}]: a part padded to {} along dimension {} is smaller "
                                        "than the part itself",
                                        name, fmt::join(shape, ", "), shard.padded_to, shard.dim));
  return Status::Ok();
}

// Copies the shard's part of `whole` (fp32, `shape`) to the end of `out`, with its padding's zeros.
void append_part(const float* whole, const std::vector<int64_t>& shape, const Shard& shard, std::vector<float>& out) {
  const size_t d = size_t(shard.dim);
  const int64_t outer = product(shape, 0, d), inner = product(shape, d + 1, shape.size());
  const int64_t part = shape[d] / shard.world, padding = shard.part_size(shape[d]) - part;
  for (int64_t o = 0; o < outer; ++o) {
    const float* from = whole + (o * shape[d] + shard.rank * part) * inner;
    out.insert(out.end(), from, from + part * inner);
    out.insert(out.end(), size_t(padding * inner), 0.0f);
  }
}

// The tensor `name`, checked against `shape`; a per-head view [heads, rows, ...] also matches the stored
// [heads * rows, ...] (MLA reads its heads' rows of q_b_proj and kv_b_proj so, MLA-lite its heads' q_proj
// bias as [heads, head_dim]).
Expected<const weights::TensorInfo*> find_tensor(const weights::WeightStore& store, const std::string& name,
                                                  const std::vector<int64_t>& shape) {
  if (shape.size() >= 2) {
    std::vector<int64_t> merged{shape[0] * shape[1]};
    merged.insert(merged.end(), shape.begin() + 2, shape.end());
    Expected<const weights::TensorInfo*> info = store.get(name);
    if (info.ok() && (*info)->shape == merged) return info;
  }
  return store.get(name, shape);
}

}  // namespace

std::vector<float> shard_of(const std::vector<float>& whole, const std::vector<int64_t>& shape, const Shard& shard) {
  if (shard.whole()) return whole;
  std::vector<float> part;
  append_part(whole.data(), shape, shard, part);
  return part;
}

Expected<backend::Buffer> alloc_shaped(backend::Ops& ops, DType dtype, const std::vector<int64_t>& shape) {
  switch (shape.size()) {
    case 1: return ops.alloc(dtype, {shape[0]});
    case 2: return ops.alloc(dtype, {shape[0], shape[1]});
    case 3: return ops.alloc(dtype, {shape[0], shape[1], shape[2]});
    case 4: return ops.alloc(dtype, {shape[0], shape[1], shape[2], shape[3]});
    default: return invalid_argument(fmt::format("weights of {} dimensions are not supported", shape.size()));
  }
}

WeightLoader WeightLoader::from_store(const weights::WeightStore& store, backend::Ops& ops) {
  return WeightLoader(&store, 0, 0.0f, ops);
}

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Runs work(0) .. work(chunks - 1) on every core.
template <class Work>
void on_every_core(int64_t chunks, const Work& work) {
  const int64_t workers = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w)
    pool.emplace_back([&] {
      for (int64_t c; (c = next++) < chunks;) work(c);
    });
  for (int64_t c; (c = next++) < chunks;) work(c);
  for (std::thread& t : pool) t.join();
}

// The random weights' values depend only on (seed, element index), so a rank draws only its part of a
// tensor, on any number of threads, and every rank sees the same weights. Normal pairs by Box-Muller from
// one hash of the pair's index (24 bits each, in float): a 70B-parameter model over four GPUs draws in
// seconds.
void normal_at(float* dst, int64_t first, int64_t count, uint64_t seed, float mean, float std) {
  const int64_t end = first + count;
  for (int64_t i = first; i < end;) {
    uint64_t state = seed ^ (0xd1b54a32d192ed03ull * uint64_t(i / 2 + 1));
    const uint64_t z = splitmix64(state);
    const float u1 = (float(z >> 40) + 1.0f) * 0x1.0p-24f, u2 = float((z >> 16) & 0xffffff) * 0x1.0p-24f;
    const float r = std::sqrt(-2.0f * std::log(u1)), angle = 6.28318530717958647f * u2;
    const float even = mean + std * r * std::cos(angle), odd = mean + std * r * std::sin(angle);
    if (i % 2 == 1) {
      dst[i++ - first] = odd;
      continue;
    }
    dst[i - first] = even;
    if (i + 1 < end) dst[i + 1 - first] = odd;
    i += 2;
  }
}

// Bytes uniform in [lo, lo + values), eight from a hash of their index / 8.
void bytes_at(uint8_t* dst, int64_t first, int64_t count, uint64_t seed, int lo, int values) {
  for (int64_t i = first; i < first + count; ++i) {
    uint64_t state = seed ^ (0xd1b54a32d192ed03ull * uint64_t(i / 8 + 1));
    const uint64_t z = splitmix64(state);
    dst[i - first] = uint8_t(lo + int(((z >> (8 * (i % 8))) & 0xff) % uint64_t(values)));
  }
}

// Calls fill(to, first, count) for the ranges of the whole tensor's elements [first, first + count) that
// make the shard's part, `to` being where each lands in the part (padding included), in pieces of at most
// 1M elements on every core.
template <class Fill>
void fill_part(const std::vector<int64_t>& shape, const Shard& shard, const Fill& fill) {
  const size_t d = shard.whole() || shape.empty() ? 0 : size_t(shard.dim);  // whole: the one part of a world of 1
  const int64_t outer = product(shape, 0, d), inner = product(shape, d + 1, shape.size()), size = shape.empty() ? 1 : shape[d];
  const int64_t part = size / shard.world, stride = shard.part_size(size) * inner, row = part * inner;
  constexpr int64_t kPiece = int64_t(1) << 20;
  const int64_t pieces = std::max<int64_t>(1, (row + kPiece - 1) / kPiece);
  on_every_core(outer * pieces, [&](int64_t i) {
    const int64_t o = i / pieces, begin = (i % pieces) * kPiece;
    if (begin < row) fill(o * stride + begin, (o * size + shard.rank * part) * inner + begin, std::min(kPiece, row - begin));
  });
}

}  // namespace

WeightLoader WeightLoader::random(uint64_t seed, float std, backend::Ops& ops) {
  return WeightLoader(nullptr, seed, std, ops);
}

bool WeightLoader::has(const std::string& name) const { return store_ == nullptr || store_->contains(name); }

void WeightLoader::count(const std::string& name, const std::vector<int64_t>& shape, size_t bytes_read) {
  if (counted_.insert(name).second) num_parameters_ += product(shape, 0, shape.size());
  bytes_loaded_ += bytes_read;
  if (progress_) progress_(bytes_loaded_, bytes_total_);
}

void WeightLoader::skip(const std::string& name, const std::vector<int64_t>& shape) {
  if (store_ == nullptr) ++num_random_;
  count(name, shape, 0);
}

Status WeightLoader::read_f32(const std::string& name, const std::vector<int64_t>& shape, const Shard& shard,
                              std::vector<float>& out) {
  DRIFT_RETURN_IF_ERROR(check_shard(name, shape, shard));
  std::vector<int64_t> part_shape = shape;
  if (!shard.whole()) part_shape[size_t(shard.dim)] = shard.part_size(shape[size_t(shard.dim)]);
  const size_t at = out.size();
  out.resize(at + size_t(product(part_shape, 0, part_shape.size())));  // padding reads as zeros
  float* dst = out.data() + at;
  if (store_ == nullptr) {
    const uint64_t seed = seed_ + 0x9e3779b97f4a7c15ull * ++num_random_;
    const float mean = name.ends_with("norm.weight") ? 1.0f : 0.0f;
    fill_part(shape, shard, [&](int64_t to, int64_t first, int64_t n) { normal_at(dst + to, first, n, seed, mean, std_); });
    count(name, shape, 0);
    return Status::Ok();
  }
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* info, find_tensor(*store_, name, shape));
  if (!is_float(info->dtype) && info->dtype != DType::kBF16)
    return invalid_argument(fmt::format("tensor '{}' in {} has dtype {}, expected a floating-point type", name,
                                        info->file, dtype_name(info->dtype)));
  // Only the shard's part is converted: a rank reads its part of the mapped file.
  const auto* bytes = reinterpret_cast<const uint8_t*>(info->bytes.data());
  const size_t elem = dtype_size(info->dtype);
  fill_part(shape, shard, [&](int64_t to, int64_t first, int64_t n) {
    convert_to_f32(bytes + size_t(first) * elem, info->dtype, dst + to, size_t(n));
  });
  if (info->dtype == DType::kF8E4M3 || info->dtype == DType::kF8E5M2)
    DRIFT_RETURN_IF_ERROR(scale_fp8_blocks(name, shape, shard, dst));
  count(name, shape, info->bytes.size() / size_t(shard.world));
  return Status::Ok();
}

Status WeightLoader::scale_fp8_blocks(const std::string& name, const std::vector<int64_t>& shape, const Shard& shard,
                                      float* dst) {
  const std::string scale_name = name + "_scale_inv";
  if (!store_->contains(scale_name))
    return unsupported(fmt::format("tensor '{}' is FP8 without block scales ('{}'); only block-scaled FP8 "
                                   "(quantization_config.weight_block_size, as DeepSeek-V3 ships) is supported",
                                   name, scale_name));
  // The tiles are of the stored matrix: a read as [heads, rows, cols] (MLA's) is that matrix's rows.
  const int64_t cols = shape.back(), rows = product(shape, 0, shape.size() - 1);
  const int64_t block_rows = fp8_block_[0], block_cols = fp8_block_[1];
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* scales,
                         store_->get(scale_name, {(rows + block_rows - 1) / block_rows, scale_cols}));
  if (!is_float(scales->dtype))
    return invalid_argument(fmt::format("tensor '{}' has dtype {}, expected a floating-point type", scale_name,
                                        dtype_name(scales->dtype)));
  std::vector<float> scale(size_t(scales->bytes.size() / dtype_size(scales->dtype)));
  convert_to_f32(scales->bytes.data(), scales->dtype, scale.data(), scale.size());
  fill_part(shape, shard, [&](int64_t to, int64_t first, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t r = (first + k) / cols, c = (first + k) % cols;
      dst[to + k] *= scale[size_t((r / block_rows) * scale_cols + c / block_cols)];
    }
  });
  count(scale_name, {0}, scales->bytes.size());
  return Status::Ok();
}

Expected<backend::Buffer> WeightLoader::load(const std::string& name, std::vector<int64_t> shape) {
  return load_stacked({name}, {shape});
}

Expected<backend::Buffer> WeightLoader::load(const std::string& name, const std::vector<int64_t>& shape,
                                             const Shard& shard) {
  return load_stacked({name}, {shape}, shard);
}

Expected<backend::Buffer> WeightLoader::load_stacked(const std::vector<std::string>& names,
                                                     const std::vector<std::vector<int64_t>>& shapes,
                                                     const Shard& shard) {
  return load_stacked(names, shapes, std::vector<Shard>(names.size(), shard));
}

Expected<backend::Buffer> WeightLoader::load_stacked(const std::vector<std::string>& names,
                                                     const std::vector<std::vector<int64_t>>& shapes,
                                                     const std::vector<Shard>& shards) {
  host_.clear();  // its capacity stays: the model's tensors reuse one buffer's pages
  int64_t rows = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    DRIFT_RETURN_IF_ERROR(read_f32(names[i], shapes[i], shards[i], host_));
    rows += shards[i].dim == 0 ? shards[i].part_size(shapes[i][0]) : shapes[i][0];
  }
  std::vector<int64_t> shape = shapes[0];
  if (shards[0].dim > 0) shape[size_t(shards[0].dim)] = shards[0].part_size(shape[size_t(shards[0].dim)]);
  shape[0] = rows;
  return upload(host_, shape);
}

Expected<backend::Buffer> WeightLoader::load_stored(const std::string& name, const std::vector<int64_t>& shape,
                                                    DType dtype, const Shard& shard) {
  DRIFT_RETURN_IF_ERROR(check_shard(name, shape, shard));
  std::vector<int64_t> part_shape = shape;
  if (!shard.whole()) part_shape[size_t(shard.dim)] = shard.part_size(shape[size_t(shard.dim)]);
  DRIFT_ASSIGN_OR_RETURN(backend::Buffer buf, alloc_shaped(*ops_, dtype, part_shape));
  // Counted as the values they hold: an MXFP4 block's 16 bytes are 32 values and its scales are not
  // parameters, so the count is the decoded model's (as the CPU path reads it).
  std::vector<int64_t> values = shape;
  if (name.ends_with("_blocks")) values.back() *= 2;
  if (name.ends_with("_scales")) values = {0};
  // The part's bytes gathered on the host (its padding's zero bytes included), then one copy.
  std::vector<uint8_t> mine(buf.view.nbytes());
  if (store_ == nullptr) {
    if (dtype != DType::kU8)
      return unsupported(fmt::format("random weights stored as {} ('{}'): only U8 formats", dtype_name(dtype), name));
    // MXFP4 scales near 2^-7 (as ../anchor's random checkpoints draw them) keep random experts finite.
    const bool scales = name.ends_with("_scales");
    const uint64_t seed = seed_ + 0x9e3779b97f4a7c15ull * ++num_random_;
    fill_part(shape, shard, [&](int64_t to, int64_t first, int64_t n) {
      bytes_at(mine.data() + to, first, n, seed, scales ? 118 : 0, scales ? 4 : 256);
    });
    count(name, values, 0);
  } else {
    DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* info, store_->get(name, shape));
    if (info->dtype != dtype)
      return invalid_argument(fmt::format("tensor '{}' in {} has dtype {}, expected {} (kept as stored)", name,
                                          info->file, dtype_name(info->dtype), dtype_name(dtype)));
    const auto* bytes = reinterpret_cast<const uint8_t*>(info->bytes.data());
    const size_t elem = dtype_size(dtype);
    fill_part(shape, shard, [&](int64_t to, int64_t first, int64_t n) {
      std::memcpy(mine.data() + size_t(to) * elem, bytes + size_t(first) * elem, size_t(n) * elem);
    });
    count(name, values, info->bytes.size() / size_t(shard.world));
  }
  ops_->copy_from_host(buf.view, mine.data());
  ops_->synchronize();  // `mine` is freed on return
  return buf;
}

Expected<std::vector<float>> WeightLoader::read_host(const std::string& name, const std::vector<int64_t>& shape,
                                                    const Shard& shard) {
  std::vector<float> host;
  DRIFT_RETURN_IF_ERROR(read_f32(name, shape, shard, host));
  return host;
}

Expected<std::vector<float>> WeightLoader::read_host_mxfp4(const std::string& name,
                                                            const std::vector<int64_t>& shape) {
  if (store_ == nullptr) return read_host(name, shape);
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* blocks, store_->get(name + "_blocks"));
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* scales, store_->get(name + "_scales"));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> host, weights::dequantize_mxfp4(*blocks, *scales, shape));
  count(name, shape, blocks->bytes.size() + scales->bytes.size());
  return host;
}

Expected<backend::Buffer> WeightLoader::upload(const std::vector<float>& host, const std::vector<int64_t>& shape) {
  const DType t = ops_->compute_dtype();
  DRIFT_ASSIGN_OR_RETURN(backend::Buffer buf, alloc_shaped(*ops_, t, shape));
  if (buf.view.numel() != int64_t(host.size()))
    return invalid_argument(fmt::format("{} values do not fill shape [{}]", host.size(), fmt::join(shape, ", ")));
  if (t == DType::kF32) {
    ops_->copy_from_host(buf.view, host.data());
  } else if (t == DType::kBF16) {
    if (bf16_.size() < host.size()) bf16_.resize(host.size());
    constexpr int64_t kChunk = int64_t(1) << 20;
    on_every_core((int64_t(host.size()) + kChunk - 1) / kChunk, [&](int64_t c) {
      for (size_t i = size_t(c * kChunk); i < std::min(host.size(), size_t((c + 1) * kChunk)); ++i) bf16_[i] = f32_to_bf16(host[i]);
    });
    ops_->copy_from_host(buf.view, bf16_.data());
    ops_->synchronize();  // bf16_ is rewritten by the next upload
  } else {
    return unsupported(fmt::format("backend compute dtype {}", dtype_name(t)));
  }
  return buf;
}

}  // namespace drift::model
