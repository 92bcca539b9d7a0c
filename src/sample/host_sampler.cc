// The host side of DeviceSampler: logits already in host memory are sampled at launch() with sample(), the
// reference the CUDA sampler follows, so its results equal the engine's host path row for row.
#include <algorithm>
#include <utility>
#include <vector>

#include "base/check.h"
#include "sample/device_sampler.h"

namespace drift::sample {

namespace {

class HostSampler final : public DeviceSampler {
 public:
  HostSampler(int32_t max_rows, int64_t vocab) : max_rows_(max_rows), vocab_(vocab), tokens_(size_t(max_rows)) {}

  void launch(const Tensor& logits, std::span<const RowSampling> rows) override {
    DRIFT_CHECK(logits.device == Device::kCpu && logits.dtype == DType::kF32, "host sampler: logits {}",
                logits.describe());
    DRIFT_CHECK_EQ(logits.size(-1), vocab_);
    DRIFT_CHECK(int32_t(rows.size()) <= max_rows_, "host sampler: {} rows, sized for {}", rows.size(), max_rows_);
    DRIFT_CHECK(!launched_, "host sampler: a launch before the previous one's wait()");
    launched_ = true;
    std::vector<SampleResult>& out = computed_;
    out.clear();
    std::vector<float> row(static_cast<size_t>(vocab_));
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* first = logits.data_as<float>() + int64_t(i) * vocab_;
      std::copy(first, first + vocab_, row.begin());
      const RowSampling& r = rows[i];
      apply_token_mask(row, r.allowed);
      out.push_back(sample::sample(row, *r.params, r.prompt_tokens, r.output_tokens, r.seed, r.position));
      // The CPU embedding refuses ids outside the vocabulary: a non-finite row feeds token 0 instead.
      tokens_[i] = std::max(out.back().token, 0);
    }
  }

  std::span<const SampleResult> wait() override {
    DRIFT_CHECK(launched_, "host sampler: wait() without a launch");
    launched_ = false;
    std::swap(results_, computed_);  // the previous wait's results stay valid until this one
    return results_;
  }

  Tensor device_tokens() const override {
    return Tensor(const_cast<int32_t*>(tokens_.data()), DType::kI32, {max_rows_});
  }

 private:
  int32_t max_rows_;
  int64_t vocab_;
  std::vector<int32_t> tokens_;  // the latest launch's tokens: what device_tokens() shows
  std::vector<SampleResult> computed_;  // of the launch not waited for, computed there
  std::vector<SampleResult> results_;   // what the last wait() returned
  bool launched_ = false;               // a launch not waited for
};

}  // namespace

std::unique_ptr<DeviceSampler> make_host_sampler(int32_t max_rows, int64_t vocab) {
  return std::make_unique<HostSampler>(max_rows, vocab);
}

}  // namespace drift::sample
