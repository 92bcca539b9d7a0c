#include "sample/cuda/cuda_sampler.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/runtime/check.h"
#include "sample/cuda/sample_kernel.h"

namespace drift::sample {

namespace {

constexpr int64_t kTop = cuda::kMaxTopLogprobs;

}  // namespace

CudaSampler::CudaSampler(backend::CudaOps& ops, int32_t max_rows, int64_t vocab)
    : ops_(ops), max_rows_(max_rows), vocab_(vocab) {
  DRIFT_CHECK(max_rows > 0 && vocab > 0, "CudaSampler of {} rows x {}", max_rows, vocab);
  const int64_t row_bytes = int64_t(sizeof(cuda::SampleRow)) * max_rows;
  rows_host_ = ops.alloc_host(DType::kU8, {row_bytes});
  rows_device_ = ops.alloc(DType::kU8, {row_bytes});
  const int64_t out_words = int64_t(max_rows) * (2 + 2 * kTop);
  out_host_ = ops.alloc_host(DType::kI32, {out_words});
  out_device_ = ops.alloc(DType::kI32, {out_words});
  copied_ = ops.make_mark();
  reserve_penalties(int64_t(64) << 10);
}

void CudaSampler::reserve_penalties(int64_t entries) {
  if (entries <= penalty_capacity_) return;
  // Buffers in use by queued work are released only after it: a launch comes after the previous one's wait().
  penalty_capacity_ = std::max(entries, 2 * penalty_capacity_);
  penalty_host_ = ops_.alloc_host(DType::kI32, {2 * penalty_capacity_});
  penalty_device_ = ops_.alloc(DType::kI32, {2 * penalty_capacity_});
  penalty_raw_ = ops_.alloc(DType::kF32, {penalty_capacity_});
}

void CudaSampler::stage_penalties(const RowSampling& row) {
  const SamplingParams& sp = *row.params;
  const bool repetition = sp.repetition_penalty != 1.0f;
  const bool frequency_presence = sp.frequency_penalty != 0.0f || sp.presence_penalty != 0.0f;
  if (!repetition && !frequency_presence) return;
  for (auto tokens : {row.prompt_tokens, row.output_tokens})
    for (int32_t t : tokens) DRIFT_CHECK(t >= 0 && t < vocab_, "token {} outside the vocabulary of {}", t, vocab_);
  sorted_output_.assign(row.output_tokens.begin(), row.output_tokens.end());
  std::sort(sorted_output_.begin(), sorted_output_.end());
  auto output_count = [&](int32_t t) {
    const auto [lo, hi] = std::equal_range(sorted_output_.begin(), sorted_output_.end(), t);
    return int32_t(hi - lo);
  };
  if (repetition) {
    // The repetition penalty reaches every distinct token of prompt and output (penalties.cc).
    seen_.assign(row.prompt_tokens.begin(), row.prompt_tokens.end());
    seen_.insert(seen_.end(), row.output_tokens.begin(), row.output_tokens.end());
    std::sort(seen_.begin(), seen_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
  } else {
    seen_.assign(sorted_output_.begin(), sorted_output_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
  }
  for (int32_t t : seen_) {
    penalty_tokens_.push_back(t);
    penalty_counts_.push_back(output_count(t));
  }
}

void CudaSampler::launch(const Tensor& logits, std::span<const RowSampling> rows) {
  const int32_t n = int32_t(rows.size());
  DRIFT_CHECK(n <= max_rows_, "CudaSampler: {} rows, sized for {}", n, max_rows_);
  DRIFT_CHECK(logits.device == Device::kCuda && logits.dtype == DType::kF32, "CudaSampler: logits {}",
              logits.describe());
  DRIFT_CHECK_EQ(logits.size(-1), vocab_);
  DRIFT_CHECK_GE(logits.numel(), int64_t(n) * vocab_);
  DRIFT_CHECK(launched_rows_ < 0, "CudaSampler: a launch before the previous one's wait()");
  launched_rows_ = n;
  if (n == 0) return;
  run_kernel(logits, n, stage_rows(rows));
}

std::span<const SampleResult> CudaSampler::wait() {
  DRIFT_CHECK(launched_rows_ >= 0, "CudaSampler: wait() without a launch");
  const int32_t n = std::exchange(launched_rows_, -1);
  results_.clear();
  if (n == 0) return results_;
  copied_->wait();
  read_results(n);
  return results_;
}

Tensor CudaSampler::device_tokens() const {
  return Tensor(out_device_.view.data, DType::kI32, {max_rows_}, Device::kCuda);
}

CudaSampler::Staged CudaSampler::stage_rows(std::span<const RowSampling> rows) {
  penalty_tokens_.clear();
  penalty_counts_.clear();
  auto* staged = static_cast<cuda::SampleRow*>(rows_host_.view.data);
  Staged out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowSampling& row = rows[i];
    const SamplingParams& sp = *row.params;
    cuda::SampleRow& r = staged[i];
    r.temperature = sp.greedy() ? 0.0f : sp.temperature;
    r.top_p = sp.top_p;
    r.min_p = sp.min_p;
    r.repetition_penalty = sp.repetition_penalty;
    r.presence_penalty = sp.presence_penalty;
    r.frequency_penalty = sp.frequency_penalty;
    r.top_k = sp.top_k;
    r.top_logprobs = std::min<int32_t>(sp.top_logprobs, cuda::kMaxTopLogprobs);
    r.seed = row.seed;
    r.position = row.position;
    r.penalty_begin = int32_t(penalty_tokens_.size());
    stage_penalties(row);
    r.penalty_end = int32_t(penalty_tokens_.size());
    r.mask_row = row.allowed.empty() ? -1 : out.num_masks++;
    if (!row.allowed.empty()) stage_mask(row.allowed, r.mask_row);
    out.any_logprobs = out.any_logprobs || sp.top_logprobs >= 0;
  }
  return out;
}

void CudaSampler::stage_mask(std::span<const uint32_t> allowed, int32_t mask_row) {
  const int64_t mask_words = (vocab_ + 31) / 32;
  DRIFT_CHECK_EQ(int64_t(allowed.size()), mask_words);
  if (masks_host_.view.data == nullptr) {
    masks_host_ = ops_.alloc_host(DType::kI32, {int64_t(max_rows_) * mask_words});
    masks_device_ = ops_.alloc(DType::kI32, {int64_t(max_rows_) * mask_words});
  }
  std::copy(allowed.begin(), allowed.end(), static_cast<uint32_t*>(masks_host_.view.data) + int64_t(mask_row) * mask_words);
}

// Uploads the staged rows, penalty lists (tokens then counts, back to back) and masks, runs the kernel and
// brings back the token ids, with the log-probability segments only when some row asked for them.
void CudaSampler::run_kernel(const Tensor& logits, int32_t n, const Staged& staged) {
  const int64_t num_penalty = int64_t(penalty_tokens_.size()), mask_words = (vocab_ + 31) / 32;
  reserve_penalties(num_penalty);
  cudaStream_t stream = ops_.stream();
  DRIFT_CUDA_CHECK(cudaMemcpyAsync(rows_device_.view.data, rows_host_.view.data, sizeof(cuda::SampleRow) * size_t(n),
                                   cudaMemcpyHostToDevice, stream));
  auto* penalty_host = penalty_host_.view.data_as<int32_t>();
  auto* penalty_device = penalty_device_.view.data_as<int32_t>();
  if (num_penalty > 0) {
    std::copy(penalty_tokens_.begin(), penalty_tokens_.end(), penalty_host);
    std::copy(penalty_counts_.begin(), penalty_counts_.end(), penalty_host + num_penalty);
    DRIFT_CUDA_CHECK(cudaMemcpyAsync(penalty_device, penalty_host, sizeof(int32_t) * 2 * size_t(num_penalty),
                                     cudaMemcpyHostToDevice, stream));
  }
  if (staged.num_masks > 0)
    DRIFT_CUDA_CHECK(cudaMemcpyAsync(masks_device_.view.data, masks_host_.view.data,
                                     sizeof(uint32_t) * size_t(staged.num_masks * mask_words), cudaMemcpyHostToDevice,
                                     stream));
  auto* out_device = out_device_.view.data_as<int32_t>();
  auto* out_host = out_host_.view.data_as<int32_t>();
  const int64_t m = max_rows_;
  cuda::run(cuda::SampleParams{.logits = logits.data_as<float>(),
                               .rows = static_cast<const cuda::SampleRow*>(rows_device_.view.data),
                               .penalty_tokens = penalty_device,
                               .penalty_counts = penalty_device + num_penalty,
                               .penalty_raw = penalty_raw_.view.data_as<float>(),
                               .masks = staged.num_masks > 0 ? static_cast<const uint32_t*>(masks_device_.view.data) : nullptr,
                               .tokens = out_device,
                               .logprobs = reinterpret_cast<float*>(out_device + m),
                               .top_tokens = out_device + 2 * m,
                               .top_logprobs = reinterpret_cast<float*>(out_device + 2 * m + kTop * m),
                               .num_rows = n,
                               .vocab = vocab_,
                               .mask_words = mask_words},
            stream);
  DRIFT_CUDA_CHECK(cudaMemcpyAsync(out_host, out_device, sizeof(int32_t) * size_t(n), cudaMemcpyDeviceToHost, stream));
  if (staged.any_logprobs) {
    DRIFT_CUDA_CHECK(cudaMemcpyAsync(out_host + m, out_device + m, sizeof(int32_t) * size_t(n), cudaMemcpyDeviceToHost,
                                     stream));
    DRIFT_CUDA_CHECK(cudaMemcpyAsync(out_host + 2 * m, out_device + 2 * m, sizeof(int32_t) * size_t(2 * kTop * m),
                                     cudaMemcpyDeviceToHost, stream));
  }
  copied_->record();
}

void CudaSampler::read_results(int32_t n) {
  const auto* staged = static_cast<const cuda::SampleRow*>(rows_host_.view.data);
  const auto* out_host = out_host_.view.data_as<int32_t>();
  const int64_t m = max_rows_;
  const auto* logprobs = reinterpret_cast<const float*>(out_host + m);
  const int32_t* top_tokens = out_host + 2 * m;
  const auto* top_logprobs = reinterpret_cast<const float*>(out_host + 2 * m + kTop * m);
  results_.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    SampleResult& res = results_[size_t(i)];
    res.token = out_host[i];
    res.logprob = 0.0f;
    res.top.clear();
    const int32_t want = staged[i].top_logprobs;
    if (want < 0) continue;
    res.logprob = logprobs[i];
    const int32_t count = int32_t(std::min<int64_t>(want, vocab_));
    for (int32_t j = 0; j < count; ++j)
      res.top.push_back({top_tokens[int64_t(i) * kTop + j], top_logprobs[int64_t(i) * kTop + j]});
  }
}

std::unique_ptr<DeviceSampler> make_cuda_sampler(backend::CudaOps& ops, int32_t max_rows, int64_t vocab) {
  return std::make_unique<CudaSampler>(ops, max_rows, vocab);
}

}  // namespace drift::sample
