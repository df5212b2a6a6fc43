#include "models/layer_norm.h"

#include "core/precision.h"

namespace loom::models {

LayerNormImpl::LayerNormImpl(const std::string& name, int64_t size, bool sequence_parallel, double eps) : eps_(eps) {
  weight = register_parallel_parameter("weight", torch::ones({size}), {name + ".weight", {}, -1, sequence_parallel});
  bias = register_parallel_parameter("bias", torch::zeros({size}), {name + ".bias", {}, -1, sequence_parallel});
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x, {x.size(-1)}, cast_to_activation(weight, x), cast_to_activation(bias, x), eps_);
}

}  // namespace loom::models
