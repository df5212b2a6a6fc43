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

// The same of GATE_UP [rows, 2F], gate in its first F columns and up in the rest (the experts'
// fused gate and up product, models/grouped_linear.h) -> [rows, F]. Its gradient is one
// [rows, 2F] tensor: where two halves' views would be copied to contiguous gate and up forward and
// each half's gradient padded with zeros to the whole width and summed back (on the MoE benchmark
// 25 of 1250 ms a step on the CPU). The values of swiglu() of the two halves, to the last bit
// where F is a multiple of the vector width (elsewhere a row's last few elements may round apart).
torch::Tensor swiglu_halves(const torch::Tensor& gate_up);

}  // namespace loom::models
