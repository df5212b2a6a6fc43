// RMSNorm on the CPU in fp32 as one autograd function: one pass over the rows forward (their
// inverse RMS kept for backward) and one back, on the rank's threads. LibTorch's at::rms_norm is
// a composition on the CPU (square, mean, rsqrt, two products forward, about eight ops back, each
// writing a fresh tensor): on the MoE benchmark's 33 norms a step it took 90 of 1250 ms.
//
// Rows are cut at fixed blocks of rows whatever the thread count, each row's sums taken in one
// fixed order, and the weight's gradient summed over the blocks in order: the bits do not depend
// on the thread count (core/cpu_threads.h).
#pragma once

#include <torch/torch.h>

namespace loom::models {

// Whether rms_norm_cpu takes these: both fp32 on the CPU, WEIGHT one row as wide as X's last dim.
bool rms_norm_cpu_takes(const torch::Tensor& x, const torch::Tensor& weight);

// WEIGHT * (X * r), r = 1 / sqrt(mean(X^2 over the last dim) + EPS), with gradients for X and WEIGHT.
torch::Tensor rms_norm_cpu(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace loom::models
