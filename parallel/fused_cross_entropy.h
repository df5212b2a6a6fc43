// The cross-entropy of one rank holding the whole vocabulary, on a GPU, in loom's two kernels
// (core/cuda_kernels/cross_entropy.cu): the logits are read in their own type (no fp32 copy),
// and backward keeps only them and each row's logsumexp. vocab_parallel_cross_entropy
// (parallel/tensor_parallel.h) takes this path where it can.
#pragma once

#include <torch/torch.h>

namespace loom::parallel {

// Whether fused_cross_entropy takes LOGITS: a CUDA tensor of fp32, fp16 or bf16, 2-D, in a
// build with loom's CUDA kernels.
bool fused_cross_entropy_takes(const torch::Tensor& logits);

// Per-row losses (fp32, [rows]) of LOGITS [rows, vocab] against TARGETS [rows] (int64), as
// at::cross_entropy_loss(logits.float(), targets, reduction none) gives them: a target of -100
// gives 0; any other outside [0, vocab) gives NaN.
torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace loom::parallel
