#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "drift/sampling_params.h"

namespace drift {
namespace {

TEST(SamplingParamsValidate, DefaultsAreValid) { EXPECT_TRUE(SamplingParams{}.validate().ok()); }

TEST(SamplingParamsValidate, AcceptsTheEdgesOfEachRange) {
  const std::vector<std::function<void(SamplingParams&)>> edges = {
      [](SamplingParams& p) { p.temperature = 0.0f; },
      [](SamplingParams& p) { p.temperature = 100.0f; },
      [](SamplingParams& p) { p.top_k = -1; },
      [](SamplingParams& p) { p.top_k = 0; },
      [](SamplingParams& p) { p.top_k = 1; },
      [](SamplingParams& p) { p.top_p = 1.0f; },
      [](SamplingParams& p) { p.top_p = 1e-6f; },
      [](SamplingParams& p) { p.min_p = 0.0f; },
      [](SamplingParams& p) { p.min_p = 1.0f; },
      [](SamplingParams& p) { p.repetition_penalty = 1e-3f; },
      [](SamplingParams& p) { p.repetition_penalty = 10.0f; },
      [](SamplingParams& p) { p.presence_penalty = -2.0f; },
      [](SamplingParams& p) { p.presence_penalty = 2.0f; },
      [](SamplingParams& p) { p.frequency_penalty = -2.0f; },
      [](SamplingParams& p) { p.frequency_penalty = 2.0f; },
      [](SamplingParams& p) { p.top_logprobs = -1; },
      [](SamplingParams& p) { p.top_logprobs = 0; },
      [](SamplingParams& p) { p.top_logprobs = 20; },
  };
  for (size_t i = 0; i < edges.size(); ++i) {
    SamplingParams p;
    edges[i](p);
    const Status s = p.validate();
    EXPECT_TRUE(s.ok()) << "edge " << i << ": " << s.to_string();
  }
}

struct BadField {
  std::function<void(SamplingParams&)> set;
  std::string message;
};

TEST(SamplingParamsValidate, RejectsEachFieldOutOfRangeNamingFieldAndValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadField> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5f; }, "temperature must be finite and >= 0, got -0.5"},
      {[=](SamplingParams& p) { p.temperature = inf; }, "temperature must be finite and >= 0, got inf"},
      {[=](SamplingParams& p) { p.temperature = nan; }, "temperature must be finite and >= 0, got nan"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k must be >= -1, got -2"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {[=](SamplingParams& p) { p.top_p = nan; }, "top_p must be in (0, 1], got nan"},
      {[](SamplingParams& p) { p.min_p = -0.25f; }, "min_p must be in [0, 1], got -0.25"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p must be in [0, 1], got 1.5"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty must be finite and > 0, got 0"},
      {[](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty must be finite and > 0, got -1"},
      {[=](SamplingParams& p) { p.repetition_penalty = inf; }, "repetition_penalty must be finite and > 0, got inf"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.presence_penalty = -3.0f; }, "presence_penalty must be in [-2, 2], got -3"},
      {[](SamplingParams& p) { p.frequency_penalty = -2.5f; }, "frequency_penalty must be in [-2, 2], got -2.5"},
      {[=](SamplingParams& p) { p.frequency_penalty = nan; }, "frequency_penalty must be in [-2, 2], got nan"},
      {[](SamplingParams& p) { p.top_logprobs = 21; }, "top_logprobs must be in [-1, 20], got 21"},
      {[](SamplingParams& p) { p.top_logprobs = -2; }, "top_logprobs must be in [-1, 20], got -2"},
  };
  for (const BadField& c : cases) {
    SamplingParams p;
    c.set(p);
    const Status s = p.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
  }
}

}  // namespace
}  // namespace drift
