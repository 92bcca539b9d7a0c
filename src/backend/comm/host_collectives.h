// The arithmetic of the host transports' collectives (ranks as threads, thread_group.h; ranks as
// processes, socket_group.h), in one place so that both give the same bits for the same parts.
#pragma once

#include <span>
#include <vector>

#include "base/tensor.h"

namespace drift::backend {

// x must be host memory of F32 or BF16 to be summed.
void check_summable(const Tensor& x);
// sum[i] = parts[0][i] + parts[1][i] + ... in rank order, in fp32; every part holds x's dtype and numel.
void sum_in_rank_order(std::span<const void* const> parts, const Tensor& x, std::vector<float>& sum);
// x = sum, rounded to x's dtype.
void store_sum(const std::vector<float>& sum, const Tensor& x);
// out [rows, world * cols] = the parts [rows, cols] side by side in rank order; x gives the parts' shape.
void interleave_columns(std::span<const void* const> parts, const Tensor& x, const Tensor& out);

}  // namespace drift::backend
