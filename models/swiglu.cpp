#include "models/swiglu.h"

#include "core/cpu_threads.h"
#include "core/cuda_kernel_args.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SwiGLU : public torch::autograd::Function<SwiGLU> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate_, const torch::Tensor& up_) {
    auto gate = gate_.contiguous(), up = up_.contiguous();
    auto out = torch::empty_like(gate);
    auto g = gate.view(-1), u = up.view(-1), o = out.view(-1);
    parallel_over_elements(gate.numel(), [&](int64_t begin, int64_t length) {
      auto piece = o.narrow(0, begin, length);
      at::silu_out(piece, g.narrow(0, begin, length));
      piece.mul_(u.narrow(0, begin, length));
    });
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const auto grad_out = grads[0].contiguous();
    auto grad_gate = torch::empty_like(gate), grad_up = torch::empty_like(up);
    auto g = gate.view(-1), u = up.view(-1), dy = grad_out.view(-1);
    auto dg = grad_gate.view(-1), du = grad_up.view(-1);
    parallel_over_elements(gate.numel(), [&](int64_t begin, int64_t length) {
      auto gi = g.narrow(0, begin, length), dyi = dy.narrow(0, begin, length);
      // d up = dy * silu(g); d gate = dy * up * silu'(g), silu'(g) = s + g s (1 - s) with s = sigmoid(g).
      auto dup = du.narrow(0, begin, length), dgate = dg.narrow(0, begin, length);
      at::silu_out(dup, gi);
      dup.mul_(dyi);
      auto dyu = dyi * u.narrow(0, begin, length);
      at::silu_backward_out(dgate, dyu, gi);
    });
    return {grad_gate, grad_up};
  }
};

// On a GPU: loom's two kernels (core/cuda_kernels/swiglu.cu), one pass each way.
class SwiGLUCuda : public torch::autograd::Function<SwiGLUCuda> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate_, const torch::Tensor& up_) {
    const c10::DeviceGuard guard(gate_.device());
    auto gate = gate_.contiguous(), up = up_.contiguous();
    auto out = torch::empty_like(gate, torch::MemoryFormat::Contiguous);
    cuda::swiglu_forward(gate.data_ptr(), up.data_ptr(), gate.numel(), *cuda::storage_of(gate.scalar_type()),
                         out.data_ptr(), cuda::current_stream(gate.device()));
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const c10::DeviceGuard guard(gate.device());
    const auto grad_out = grads[0].to(gate.scalar_type()).contiguous();
    auto grad_gate = torch::empty_like(gate), grad_up = torch::empty_like(up);
    cuda::swiglu_backward(gate.data_ptr(), up.data_ptr(), grad_out.data_ptr(), gate.numel(),
                          *cuda::storage_of(gate.scalar_type()), grad_gate.data_ptr(), grad_up.data_ptr(),
                          cuda::current_stream(gate.device()));
    return {grad_gate, grad_up};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!gate.device().is_cpu()) {
    if (cuda::kernels_take(gate.device(), gate.scalar_type()) && up.scalar_type() == gate.scalar_type() &&
        up.device() == gate.device() && up.sizes() == gate.sizes())
      return SwiGLUCuda::apply(gate, up);
    return torch::silu(gate) * up;
  }
  return SwiGLU::apply(gate, up);
}

}  // namespace loom::models
