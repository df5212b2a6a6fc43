// SwiGLU's gate, silu(gate) * up, as one autograd function spread over the BLAS
// threads on CPU (as models/gelu.h is, for the same reason: LibTorch's own ops
// run on one thread beside OpenBLAS's pool). Backward keeps only gate and up,
// where the composed ops would also keep silu(gate).
#pragma once

#include <torch/torch.h>

namespace loom::models {

// silu(GATE) * UP, silu(g) = g * sigmoid(g).
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace loom::models
