#include "models/swiglu.h"

#include <algorithm>

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
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "loom's CPU SwiGLU has no second derivative (a backward with create_graph)");
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

// Rows of T per block: small enough that a block's halves stay in the core's cache from one op to
// the next, where each op over the whole tensor would read them from memory again (in a Python
// model of the step, 7.1-8.3 ms whole against 7.4 in blocks: not a measured gain at this width).
// A row's F elements are one loop wherever the row falls, so the bits do not depend on the thread count.
int64_t rows_per_block(const torch::Tensor& t) {
  return std::max<int64_t>(1, (256 << 10) / std::max<int64_t>(1, t.size(1) * t.element_size()));
}

// GATE_UP [rows, 2F] -> [rows, F].
class SwiGLUHalves : public torch::autograd::Function<SwiGLUHalves> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate_up_) {
    auto gate_up = gate_up_.contiguous();
    const int64_t width = gate_up.size(1) / 2;
    auto out = torch::empty({gate_up.size(0), width}, gate_up.options());
    parallel_over_blocks(gate_up.size(0), rows_per_block(gate_up), [&](int64_t begin, int64_t end) {
      auto rows = gate_up.narrow(0, begin, end - begin);
      auto piece = out.narrow(0, begin, end - begin);
      at::silu_out(piece, rows.narrow(1, 0, width));
      piece.mul_(rows.narrow(1, width, width));
    });
    ctx->save_for_backward({gate_up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "loom's CPU SwiGLU has no second derivative (a backward with create_graph)");
    const auto gate_up = ctx->get_saved_variables()[0];
    const auto grad_out = grads[0].contiguous();
    const int64_t width = gate_up.size(1) / 2;
    auto grad = torch::empty_like(gate_up);
    parallel_over_blocks(gate_up.size(0), rows_per_block(gate_up), [&](int64_t begin, int64_t end) {
      auto rows = gate_up.narrow(0, begin, end - begin), dy = grad_out.narrow(0, begin, end - begin);
      auto g = rows.narrow(1, 0, width);
      auto dgrad = grad.narrow(0, begin, end - begin);
      auto dgate = dgrad.narrow(1, 0, width), dup = dgrad.narrow(1, width, width);
      at::silu_out(dup, g);
      dup.mul_(dy);
      at::silu_backward_out(dgate, dy * rows.narrow(1, width, width), g);
    });
    return {grad};
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

torch::Tensor swiglu_halves(const torch::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "swiglu_halves: gate_up ", gate_up.sizes());
  const int64_t width = gate_up.size(1) / 2;
  // On a GPU loom's kernels take contiguous halves.
  if (!gate_up.device().is_cpu()) return swiglu(gate_up.narrow(1, 0, width), gate_up.narrow(1, width, width));
  return SwiGLUHalves::apply(gate_up);
}

}  // namespace loom::models
