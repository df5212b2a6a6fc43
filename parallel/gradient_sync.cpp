#include "parallel/gradient_sync.h"

namespace loom::parallel {

std::vector<torch::Tensor> GradientSync::whole_gradients() {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_) {
    const auto& g = p.tensor.grad();
    grads.push_back(g.defined() ? g.detach().clone() : torch::zeros_like(p.tensor));
  }
  return grads;
}

std::unique_ptr<GradientSync> make_gradient_sync(ProcessGroups& groups, const GradientSyncOptions& options) {
  if (options.zero_stage >= 2 && groups.dp_cp().size() > 1) return make_unit_sharded_sync(groups, options);
  return make_bucketed_sync(groups, options);
}

}  // namespace loom::parallel
