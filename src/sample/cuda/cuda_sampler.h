// CudaSampler: the DeviceSampler of the CUDA backend. Per step it stages each row's parameters (64
// bytes), structured-output token masks, and, for rows with penalties, the distinct tokens those look at with their output counts, in
// page-locked memory; uploads them in at most two copies; runs one sampling kernel over the rows; and
// copies back the token ids (and log-probabilities only when a row asked for them). wait() waits on an
// event after that copy, not on the stream, so a forward queued behind the sampling keeps running.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "sample/device_sampler.h"

namespace drift::sample {

class CudaSampler final : public DeviceSampler {
 public:
  // Rows of up to `vocab` logits, at most `max_rows` per call, queued on the backend's stream.
  CudaSampler(backend::CudaOps& ops, int32_t max_rows, int64_t vocab);

  void launch(const Tensor& logits, std::span<const RowSampling> rows) override;
  std::span<const SampleResult> wait() override;
  Tensor device_tokens() const override;

 private:
  // Grows the penalty buffers to hold at least `entries` tokens.
  void reserve_penalties(int64_t entries);
  // Appends row r's penalty entries (distinct tokens, output counts) to the staging lists.
  void stage_penalties(const RowSampling& row);
  struct Staged {
    int32_t num_masks = 0;      // rows with an allowed-token mask
    bool any_logprobs = false;  // some row asked for log-probabilities
  };
  // Writes every row's parameters, penalty entries and mask into the host staging buffers.
  Staged stage_rows(std::span<const RowSampling> rows);
  void stage_mask(std::span<const uint32_t> allowed, int32_t mask_row);
  void run_kernel(const Tensor& logits, int32_t n, const Staged& staged);
  // results_ from the tokens and log-probabilities brought back.
  void read_results(int32_t n);

  backend::CudaOps& ops_;
  int32_t max_rows_;
  int64_t vocab_;
  backend::Buffer rows_host_, rows_device_;       // [max_rows] cuda::SampleRow
  backend::Buffer penalty_host_, penalty_device_;  // [2 * capacity] int32: tokens, then their counts
  backend::Buffer penalty_raw_;                    // [capacity] fp32 kernel scratch
  backend::Buffer masks_host_, masks_device_;      // [max_rows, mask words] uint32, made at the first mask
  int64_t penalty_capacity_ = 0;
  // tokens [max_rows] int32 | logprobs [max_rows] fp32 | top tokens [max_rows, 20] int32 | top logprobs
  backend::Buffer out_host_, out_device_;
  std::unique_ptr<backend::QueueMark> copied_;  // the launch's results are on the host
  int32_t launched_rows_ = -1;                  // rows of the launch not waited for; -1: none
  std::vector<int32_t> penalty_tokens_, penalty_counts_, sorted_output_, seen_;
  std::vector<SampleResult> results_;
};

// The CUDA sampler, as the engine holds it.
std::unique_ptr<DeviceSampler> make_cuda_sampler(backend::CudaOps& ops, int32_t max_rows, int64_t vocab);

}  // namespace drift::sample
