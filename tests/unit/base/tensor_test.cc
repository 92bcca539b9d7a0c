#include "base/tensor.h"

#include <gtest/gtest.h>

namespace drift {
namespace {

TEST(Tensor, ViewAndSliceKeepTheSameBytes) {
  HostTensor t = HostTensor::zeros(DType::kF32, {4, 6});
  for (int i = 0; i < 24; ++i) t.data_as<float>()[i] = float(i);
  const Tensor rows = t.tensor().slice(1, 3);
  EXPECT_EQ(rows.size(0), 2);
  EXPECT_EQ(rows.data_as<float>()[0], 6.0f);
  const Tensor v = rows.view({2, 2, 3});
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.size(-1), 3);
  EXPECT_EQ(v.describe(), "[2, 2, 3] F32");
  EXPECT_EQ(t.tensor().nbytes(), 24u * 4u);
}

TEST(TensorDeathTest, ViewWithAnotherElementCountFailsWithBothCounts) {
  HostTensor t(DType::kF32, {4, 6});
  EXPECT_DEATH(t.tensor().view({5, 5}), "25 vs 24");
}

}  // namespace
}  // namespace drift
