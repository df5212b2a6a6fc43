// train.precision as dtypes. Mixed precision keeps the model's parameters in
// bf16 or fp16 and fp32 master weights beside them (parallel/master_weights.h);
// layers cast a parameter to the dtype of the activation it meets
// (cast_to_activation), which is a no-op when the two agree.
#pragma once

#include <torch/torch.h>

#include "core/config_enums.h"

namespace loom {

struct Precision {
  torch::ScalarType params = torch::kFloat;       // the model's copy of its parameters
  torch::ScalarType activations = torch::kFloat;  // what layers compute in
  bool mixed() const { return params != torch::kFloat; }
  bool loss_scaling() const { return params == torch::kHalf; }

  static Precision of(TrainPrecision precision) {
    if (precision == TrainPrecision::bf16) return {torch::kBFloat16, torch::kBFloat16};
    // LibTorch's CPU build has no fp16 kernels for matrix products, layer norm,
    // softmax or GELU: fp16 parameters (and so fp16 gradients, which is what
    // loss scaling protects) with fp32 arithmetic around them.
    if (precision == TrainPrecision::fp16) return {torch::kHalf, torch::kFloat};
    return {};
  }
};

inline torch::Tensor cast_to_activation(const torch::Tensor& param, const torch::Tensor& activation) {
  if (!param.defined() || param.scalar_type() == activation.scalar_type()) return param;
  return param.to(activation.scalar_type());
}

}  // namespace loom
