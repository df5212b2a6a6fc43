// Where the parallel machinery learns about parameters: a layer registers each
// parameter it creates together with what gradient reduction, clipping, ZeRO
// and checkpoints must know of it (global name, tp split dimension,
// sequence-parallel, expert, tied copy: parallel/parallel_parameter.h). The
// trainer reads them from the model with collect_parallel_parameters(), which
// walks the module tree and refuses a model holding a parameter no layer
// described, naming it, so that a model cannot forget one.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "parallel/parallel_parameter.h"

namespace loom::parallel {

class ParallelModule : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;
  // This module's parameters with their descriptions, in registration order.
  const std::vector<ParallelParameter>& parallel_specs() const { return specs_; }
  // This module's parameters are copies of parameters another pipeline stage owns
  // (GPT's tied word embedding on the last stage): counted once in norms, saved once.
  void mark_tied_copies() {
    for (auto& spec : specs_) spec.tied_copy = true;
  }

 protected:
  // register_parameter(NAME, TENSOR) with SPEC's description (its tensor is set here).
  torch::Tensor register_parallel_parameter(const std::string& name, torch::Tensor tensor, ParallelParameter spec);

 private:
  std::vector<ParallelParameter> specs_;
};

// Every parameter of ROOT's tree that a ParallelModule described, modules in
// pre-order (a module's own, then its children's, in registration order). Throws
// InputError naming the parameters (as ROOT's named_parameters() calls them) that
// none described.
std::vector<ParallelParameter> collect_parallel_parameters(const torch::nn::Module& root);

}  // namespace loom::parallel
