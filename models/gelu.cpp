#include "models/gelu.h"

#include <functional>

#include "core/cpu_threads.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class GeluTanh : public torch::autograd::Function<GeluTanh> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    auto flat_in = input.view(-1), flat_out = out.view(-1);
    parallel_over_elements(input.numel(), [&](int64_t begin, int64_t length) {
      auto piece = flat_out.narrow(0, begin, length);
      at::gelu_out(piece, flat_in.narrow(0, begin, length), "tanh");
    });
    ctx->save_for_backward({input});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "loom's CPU GELU has no second derivative (a backward with create_graph)");
    const auto input = ctx->get_saved_variables()[0];
    const auto grad_out = grads[0].contiguous();
    auto grad_in = torch::empty_like(input);
    auto flat_in = input.view(-1), flat_grad_out = grad_out.view(-1), flat_grad_in = grad_in.view(-1);
    parallel_over_elements(input.numel(), [&](int64_t begin, int64_t length) {
      auto piece = flat_grad_in.narrow(0, begin, length);
      at::gelu_backward_out(piece, flat_grad_out.narrow(0, begin, length), flat_in.narrow(0, begin, length), "tanh");
    });
    return {grad_in};
  }
};

}  // namespace

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  if (!x.device().is_cpu()) return torch::gelu(x, "tanh");
  return GeluTanh::apply(x);
}

}  // namespace loom::models
