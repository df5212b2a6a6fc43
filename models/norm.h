// The normalisation before each block's attention and MLP and before the output
// layer: LayerNorm (GPT-2: weight and bias) or RMSNorm (Llama: weight only,
// x / sqrt(mean(x^2) + eps) computed in fp32, as Hugging Face does). The parameters
// are replicated over tp and registered with their global names; under sequence
// parallelism each tp rank normalises its part of the sequence, so their gradients
// are partial sums over tp (parallel/parallel_parameter.h).
#pragma once

#include <torch/torch.h>

#include <string>

#include "core/config_enums.h"
#include "parallel/parallel_module.h"

namespace loom::models {

class NormImpl : public parallel::ParallelModule {
 public:
  // NAME: the global name ("h.0.ln_1"): the parameters are NAME.weight (and NAME.bias for LayerNorm).
  NormImpl(NormKind kind, const std::string& name, int64_t size, bool sequence_parallel, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias;  // bias undefined for RMSNorm

 private:
  NormKind kind_;
  double eps_;
};
TORCH_MODULE(Norm);

// RMSNorm's formula: WEIGHT * (x / sqrt(mean(x^2) + EPS)), the statistics in fp32,
// the normalised x cast back to x's dtype before the weight multiplies it.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace loom::models
