// GELU with the tanh approximation (GPT-2's), the MLP's largest elementwise op,
// on all of the rank's threads on CPU (core/cpu_threads.h). LibTorch's own
// gelu cuts the tensor into one piece per thread wherever that falls, and
// its last bit then depends on the thread count; here the pieces start at
// multiples of 64 elements, so the result does not.
#pragma once

#include <torch/torch.h>

namespace loom::models {

torch::Tensor gelu_tanh(const torch::Tensor& x);

}  // namespace loom::models
