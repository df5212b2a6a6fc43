// LayerNorm with a weight and a bias replicated over tp (GPT-2's ln_1, ln_2, ln_f),
// registered with their global names. Under sequence parallelism each tp rank
// normalises its part of the sequence, so the gradients of both are partial
// sums over tp (parallel/parallel_parameter.h). Computes in the activation's dtype.
#pragma once

#include <torch/torch.h>

#include <string>

#include "parallel/parallel_module.h"

namespace loom::models {

class LayerNormImpl : public parallel::ParallelModule {
 public:
  // NAME: the global name ("h.0.ln_1"): the parameters are NAME.weight and NAME.bias.
  LayerNormImpl(const std::string& name, int64_t size, bool sequence_parallel, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias;

 private:
  double eps_;
};
TORCH_MODULE(LayerNorm);

}  // namespace loom::models
