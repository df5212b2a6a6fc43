// GELU with the tanh approximation (GPT-2's), spread over the BLAS threads on CPU.
//
// LibTorch's own ops run on one thread beside OpenBLAS's pool (README,
// "Threads"), so the MLP's GELU, the largest elementwise op of a step, would
// leave the other cores idle; this runs it, and its backward, in contiguous
// pieces on all of them (core/blas_threads.h). The pieces start at multiples of
// 64 elements, where LibTorch's vectorised loop would be anyway, so the result
// does not depend on the number of threads.
#pragma once

#include <torch/torch.h>

namespace loom::models {

torch::Tensor gelu_tanh(const torch::Tensor& x);

}  // namespace loom::models
