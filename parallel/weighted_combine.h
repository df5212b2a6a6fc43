// The MoE combine with every choice kept, on a GPU: each token's K expert rows times its router
// weights, summed, in one kernel each way (core/cuda_kernels/combine.cu) where the composition
// (TokenDispatcher::combine's CPU path) gathers, multiplies with broadcasting and sums in three,
// and twice that back. Rounded as the composition rounds.
#pragma once

#include <torch/torch.h>

namespace loom::parallel {

// Whether the kernels take these tensors: a GPU they run on, one floating type for both.
bool weighted_combine_takes(const torch::Tensor& rows, const torch::Tensor& weights);

// ROWS [T K, H] (the experts' output rows), ROW_OF_CHOICE [T K] (int64: the row of token t's
// j-th choice at t K + j, a permutation), WEIGHTS [T, K] of ROWS' type -> [T, H]: the sum over j
// of rows[row_of_choice[t K + j]] * weights[t, j]. Differentiable in ROWS and WEIGHTS.
torch::Tensor weighted_combine(const torch::Tensor& rows, const torch::Tensor& row_of_choice,
                               const torch::Tensor& weights);

}  // namespace loom::parallel
