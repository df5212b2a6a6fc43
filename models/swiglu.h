// SwiGLU's gate, silu(gate) * up, as one autograd function: on the CPU on the rank's
// threads, cut at fixed places as models/gelu.h is (the bits do not depend on the
// thread count); on a GPU in loom's two kernels (core/cuda_kernels/swiglu.cu), which
// round where the CPU's rounds. Backward keeps only gate and up, where the composed ops
// would also keep silu(gate).
#pragma once

#include <torch/torch.h>

namespace loom::models {

// silu(GATE) * UP, silu(g) = g * sigmoid(g).
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace loom::models
