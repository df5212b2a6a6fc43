#include "parallel/fused_cross_entropy.h"

#include "core/cuda_kernel_args.h"

namespace loom::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits_, const torch::Tensor& targets_) {
    const c10::DeviceGuard guard(logits_.device());
    auto logits = logits_.contiguous();
    auto targets = targets_.to(torch::kLong).contiguous();
    const auto options = logits.options().dtype(torch::kFloat);
    auto loss = torch::empty({logits.size(0)}, options);
    auto lse = torch::empty({logits.size(0)}, options);
    cuda::cross_entropy_forward(logits.data_ptr(), *cuda::storage_of(logits.scalar_type()), targets.data_ptr<int64_t>(),
                                logits.size(0), logits.size(1), loss.data_ptr<float>(), lse.data_ptr<float>(),
                                cuda::current_stream(logits.device()));
    ctx->save_for_backward({logits, targets, lse});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& logits = saved[0];
    const c10::DeviceGuard guard(logits.device());
    // The loss's gradient is often a broadcast scalar (a mean's): made whole, in fp32.
    auto grad_loss = grads[0].to(torch::kFloat).contiguous();
    auto grad = torch::empty_like(logits, torch::MemoryFormat::Contiguous);
    cuda::cross_entropy_backward(logits.data_ptr(), *cuda::storage_of(logits.scalar_type()),
                                 saved[1].data_ptr<int64_t>(), saved[2].data_ptr<float>(), grad_loss.data_ptr<float>(),
                                 logits.size(0), logits.size(1), grad.data_ptr(),
                                 cuda::current_stream(logits.device()));
    return {grad, torch::Tensor()};
  }
};

}  // namespace

bool fused_cross_entropy_takes(const torch::Tensor& logits) {
  return logits.dim() == 2 && cuda::kernels_take(logits.device(), logits.scalar_type());
}

torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(fused_cross_entropy_takes(logits),
              "fused_cross_entropy: logits must be a 2-D CUDA tensor of fp32, fp16 or bf16");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0) && targets.device() == logits.device(),
              "fused_cross_entropy: targets must be [rows] on the logits' device");
  return FusedCrossEntropy::apply(logits, targets);
}

}  // namespace loom::parallel
