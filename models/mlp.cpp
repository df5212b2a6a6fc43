#include "models/mlp.h"

#include <string>

#include "models/gelu.h"
#include "models/residual_projection.h"
#include "models/swiglu.h"

namespace loom::models {

MlpImpl::MlpImpl(const GPTOptions& options, int64_t layer, TensorParallelContext tp, const std::string& name,
                 int64_t ffn)
    : tp_(tp) {
  const int64_t h = options.hidden_size, f = ffn > 0 ? ffn : options.ffn_hidden_size;
  const std::string p = name.empty() ? "h." + std::to_string(layer) + ".mlp." : name;
  const bool sp = tp.sequence_parallel;
  auto column = [&](const std::string& name) {
    return parallel::ColumnParallelLinear(parallel::ColumnParallelLinearOptions(h, f)
                                              .name(p + name)
                                              .seed(options.seed)
                                              .bias(options.bias)
                                              .sequence_parallel(sp),
                                          *tp.tp);
  };
  // Registered in order of use: the parameters are collected in this order.
  if (options.activation == Activation::gelu) {
    fc_ = register_module("fc", column("fc"));
  } else {
    gate_ = register_module("gate", column("gate"));
    up_ = register_module("up", column("up"));
  }
  proj_ = register_module("proj", residual_projection(p + "proj", f, options, tp));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  if (fc_) return proj_->forward(gelu_tanh(fc_->forward(x)));
  // Gate and up read the same input: one entry into the tp region for both.
  auto entered = parallel::enter_column_parallel_region(x, *tp_.tp, tp_.sequence_parallel);
  return proj_->forward(swiglu(gate_->forward_entered(entered), up_->forward_entered(entered)));
}

}  // namespace loom::models
