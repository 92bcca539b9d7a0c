#include "model/weight_loader.h"

#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "weights/mxfp4.h"

namespace drift::model {

WeightLoader WeightLoader::from_store(const weights::WeightStore& store, backend::Ops& ops) {
  return WeightLoader(&store, 0, 0.0f, ops);
}

WeightLoader WeightLoader::random(uint64_t seed, float std, backend::Ops& ops) {
  return WeightLoader(nullptr, seed, std, ops);
}

bool WeightLoader::has(const std::string& name) const { return store_ == nullptr || store_->contains(name); }

Status WeightLoader::read_f32(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& out) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t offset = out.size();
  out.resize(offset + size_t(numel));
  float* dst = out.data() + offset;
  if (store_ == nullptr) {
    std::mt19937_64 rng(seed_ + 0x9e3779b97f4a7c15ull * ++num_random_);
    std::normal_distribution<float> normal(0.0f, std_);
    const bool is_norm = name.ends_with("norm.weight");
    for (int64_t i = 0; i < numel; ++i) dst[i] = (is_norm ? 1.0f : 0.0f) + normal(rng);
    return Status::Ok();
  }
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* info, store_->get(name, shape));
  if (!is_float(info->dtype) && info->dtype != DType::kBF16)
    return invalid_argument(fmt::format("tensor '{}' in {} has dtype {}, expected a floating-point type", name,
                                        info->file, dtype_name(info->dtype)));
  convert_to_f32(info->bytes.data(), info->dtype, dst, size_t(numel));
  bytes_loaded_ += info->bytes.size();
  if (progress_) progress_(bytes_loaded_, bytes_total_);
  return Status::Ok();
}

Expected<backend::Buffer> WeightLoader::load(const std::string& name, std::vector<int64_t> shape) {
  return load_stacked({name}, {shape});
}

Expected<backend::Buffer> WeightLoader::load_stacked(const std::vector<std::string>& names,
                                                     const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<float> host;
  int64_t rows = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    DRIFT_RETURN_IF_ERROR(read_f32(names[i], shapes[i], host));
    rows += shapes[i][0];
  }
  std::vector<int64_t> shape = shapes[0];
  shape[0] = rows;
  return upload(host, shape);
}

Expected<std::vector<float>> WeightLoader::read_host(const std::string& name, const std::vector<int64_t>& shape) {
  std::vector<float> host;
  DRIFT_RETURN_IF_ERROR(read_f32(name, shape, host));
  return host;
}

Expected<std::vector<float>> WeightLoader::read_host_mxfp4(const std::string& name,
                                                            const std::vector<int64_t>& shape) {
  if (store_ == nullptr) return read_host(name, shape);
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* blocks, store_->get(name + "_blocks"));
  DRIFT_ASSIGN_OR_RETURN(const weights::TensorInfo* scales, store_->get(name + "_scales"));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> host, weights::dequantize_mxfp4(*blocks, *scales, shape));
  bytes_loaded_ += blocks->bytes.size() + scales->bytes.size();
  if (progress_) progress_(bytes_loaded_, bytes_total_);
  return host;
}

Expected<backend::Buffer> WeightLoader::upload(const std::vector<float>& host, const std::vector<int64_t>& shape) {
  const DType t = ops_->compute_dtype();
  backend::Buffer buf;
  switch (shape.size()) {
    case 1: buf = ops_->alloc(t, {shape[0]}); break;
    case 2: buf = ops_->alloc(t, {shape[0], shape[1]}); break;
    case 3: buf = ops_->alloc(t, {shape[0], shape[1], shape[2]}); break;
    case 4: buf = ops_->alloc(t, {shape[0], shape[1], shape[2], shape[3]}); break;
    default: return invalid_argument(fmt::format("weights of {} dimensions are not supported", shape.size()));
  }
  if (buf.view.numel() != int64_t(host.size()))
    return invalid_argument(fmt::format("{} values do not fill shape [{}]", host.size(), fmt::join(shape, ", ")));
  if (ops_->compute_dtype() == DType::kF32) {
    ops_->copy_from_host(buf.view, host.data());
  } else if (ops_->compute_dtype() == DType::kBF16) {
    std::vector<uint16_t> bf(host.size());
    for (size_t i = 0; i < host.size(); ++i) bf[i] = f32_to_bf16(host[i]);
    ops_->copy_from_host(buf.view, bf.data());
  } else {
    return unsupported(fmt::format("backend compute dtype {}", dtype_name(ops_->compute_dtype())));
  }
  return buf;
}

}  // namespace drift::model
