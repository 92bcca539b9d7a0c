#include "ceilings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "base/dtype.h"

namespace drift::bench {

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& e : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    e = f32_to_bf16((float(x >> 40) / float(1ull << 24) - 0.5f) * 0.1f);
  }
  return v;
}

void print_table(const std::string& table, const std::string& markdown) {
  std::printf("\n%s", table.c_str());
  if (!markdown.empty()) std::ofstream(markdown) << table;
}

void fill_random_bf16(backend::CudaOps& ops, const Tensor& t, uint64_t seed) {
  const size_t total = t.nbytes(), tile = std::min<size_t>(total, size_t(64) << 20);
  const std::vector<uint16_t> pattern = random_bf16(tile / 2, seed);
  ops.copy_from_host(Tensor(t.data, DType::kBF16, {int64_t(tile / 2)}, Device::kCuda), pattern.data());
  auto* base = static_cast<uint8_t*>(t.data);
  for (size_t done = tile; done < total; done += tile)
    DRIFT_CUDA_CHECK(cudaMemcpyAsync(base + done, base, std::min(tile, total - done), cudaMemcpyDeviceToDevice, ops.stream()));
  ops.synchronize();
}

std::vector<float> read_bf16(backend::CudaOps& ops, const Tensor& t) {
  std::vector<uint16_t> bits(size_t(t.numel()));
  ops.copy_to_host(bits.data(), t);
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

Ceilings measure_ceilings(backend::CudaOps& ops) {
  Ceilings c;
  {
    const size_t bytes = size_t(2) << 30;
    auto a = ops.alloc(DType::kU8, {int64_t(bytes)}), b = ops.alloc(DType::kU8, {int64_t(bytes)});
    DRIFT_CUDA_CHECK(cudaMemsetAsync(a.view.data, 1, bytes, ops.stream()));
    const double t = time_on_stream(ops.stream(), 2, 10, [&] {
      DRIFT_CUDA_CHECK(cudaMemcpyAsync(b.view.data, a.view.data, bytes, cudaMemcpyDeviceToDevice, ops.stream()));
    });
    c.bandwidth = 2.0 * double(bytes) / t;
  }
  {
    const int64_t n = 8192;
    auto x = ops.alloc(DType::kBF16, {n, n}), w = ops.alloc(DType::kBF16, {n, n}), out = ops.alloc(DType::kBF16, {n, n});
    ops.copy_from_host(x.view, random_bf16(size_t(n * n), 1).data());
    ops.copy_from_host(w.view, random_bf16(size_t(n * n), 2).data());
    const double t = time_on_stream(ops.stream(), 3, 10, [&] { ops.linear(x.view, w.view, Tensor(), out.view); });
    c.bf16_rate = 2.0 * double(n) * n * n / t;
  }
  ops.synchronize();
  return c;
}

void fill_random_e4m3(const Tensor& t, uint32_t seed) {
  const size_t bytes = t.nbytes(), pattern = std::min<size_t>(bytes, size_t(64) << 20);
  std::vector<uint8_t> host(pattern);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& c : host) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = uint8_t((x & 0x80u) | ((x >> 8) % 0x78u));
  }
  for (size_t at = 0; at < bytes; at += pattern)
    DRIFT_CUDA_CHECK(cudaMemcpy(static_cast<char*>(t.data) + at, host.data(), std::min(pattern, bytes - at),
                                cudaMemcpyHostToDevice));
}

backend::Buffer upload_i32(backend::CudaOps& ops, const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = ops.alloc(DType::kI32, shape);
  ops.copy_from_host(b.view, v.data());
  return b;
}

bool batches_pair_with_contexts_on_a_gpu(const char* name, size_t batches, size_t contexts) {
  if (batches != contexts) {
    std::fprintf(stderr, "%s: --batch and --context pair up; give as many of each\n", name);
    return false;
  }
  if (backend::cuda_device_count() == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", name);
    return false;
  }
  return true;
}

}  // namespace drift::bench
