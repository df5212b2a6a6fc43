// A callback after autograd has accumulated a micro-batch's gradient into a
// parameter's .grad (a post-hook on its AccumulateGrad node): how gradient
// buckets, ZeRO units and master weights learn that a gradient is in.
//
// A backward that carries no gradient to the parameter (its weight gradient
// deferred to a zero-bubble W pass: parallel/weight_grad_store.h) still runs
// the accumulator, with an undefined gradient; that is not an arrival.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <memory>

namespace loom::parallel {

// Registers CALLBACK on PARAM's gradient accumulator and returns the
// accumulator, which the caller keeps alive (parameters hold it weakly); null
// for a tensor outside autograd.
inline std::shared_ptr<torch::autograd::Node> after_gradient_accumulated(const torch::Tensor& param,
                                                                         std::function<void()> callback) {
  class Hook : public torch::autograd::FunctionPostHook {
   public:
    explicit Hook(std::function<void()> callback) : callback_(std::move(callback)) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list& gradients) override {
      if (!gradients.empty() && gradients[0].defined()) callback_();
      return outputs;
    }

   private:
    std::function<void()> callback_;
  };
  auto accumulator = torch::autograd::impl::grad_accumulator(param);
  if (accumulator) accumulator->add_post_hook(std::make_unique<Hook>(std::move(callback)));
  return accumulator;
}

}  // namespace loom::parallel
