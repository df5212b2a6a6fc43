#include "models/norm.h"

#include "core/precision.h"
#include "models/rms_norm_cpu.h"

namespace loom::models {

NormImpl::NormImpl(NormKind kind, const std::string& name, int64_t size, bool sequence_parallel, double eps)
    : kind_(kind), eps_(eps) {
  weight = register_parallel_parameter("weight", torch::ones({size}), {name + ".weight", {}, -1, sequence_parallel});
  if (kind == NormKind::layernorm) {
    bias = register_parallel_parameter("bias", torch::zeros({size}), {name + ".bias", {}, -1, sequence_parallel});
  }
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (kind_ == NormKind::rmsnorm) return rms_norm(x, cast_to_activation(weight, x), eps_);
  return torch::layer_norm(x, {x.size(-1)}, cast_to_activation(weight, x), cast_to_activation(bias, x), eps_);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // LibTorch's own RMSNorm: one fused kernel each way on a GPU, where the composition
  // (upcast, square, mean, rsqrt, multiply, downcast, scale) took seven passes over the
  // activations forward and more back. It computes in fp32 and rounds once, after the
  // weight (Hugging Face's Llama rounds before it: the same in fp32). On the CPU in fp32, loom's
  // own (models/rms_norm_cpu.h), where LibTorch's is a composition there too.
  if (rms_norm_cpu_takes(x, weight)) return rms_norm_cpu(x, weight, eps);
  return at::rms_norm(x, {x.size(-1)}, weight, eps);
}

}  // namespace loom::models
