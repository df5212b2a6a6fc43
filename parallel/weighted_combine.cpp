#include "parallel/weighted_combine.h"

#include <cstdint>
#include <limits>

#include "core/cuda_kernel_args.h"

namespace loom::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct WeightedCombine : torch::autograd::Function<WeightedCombine> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows_, const torch::Tensor& row_of_choice_,
                               const torch::Tensor& weights_) {
    const c10::DeviceGuard guard(rows_.device());
    auto rows = rows_.contiguous(), weights = weights_.contiguous();
    auto row_of_choice = row_of_choice_.to(torch::kLong).contiguous();
    const int64_t tokens = weights.size(0), k = weights.size(1), width = rows.size(1);
    auto out = torch::empty({tokens, width}, rows.options());
    cuda::combine_forward(rows.data_ptr(), row_of_choice.data_ptr<int64_t>(), weights.data_ptr(), tokens, k, width,
                          *cuda::storage_of(rows.scalar_type()), out.data_ptr(), cuda::current_stream(rows.device()));
    ctx->save_for_backward({rows, row_of_choice, weights});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &rows = saved[0], &row_of_choice = saved[1], &weights = saved[2];
    const c10::DeviceGuard guard(rows.device());
    const auto grad_out = grads[0].to(rows.scalar_type()).contiguous();
    auto grad_rows = torch::empty_like(rows), grad_weights = torch::empty_like(weights);
    cuda::combine_backward(rows.data_ptr(), row_of_choice.data_ptr<int64_t>(), weights.data_ptr(), grad_out.data_ptr(),
                           weights.size(0), weights.size(1), rows.size(1), *cuda::storage_of(rows.scalar_type()),
                           grad_rows.data_ptr(), grad_weights.data_ptr(), cuda::current_stream(rows.device()));
    return {grad_rows, torch::Tensor(), grad_weights};
  }
};

}  // namespace

bool weighted_combine_takes(const torch::Tensor& rows, const torch::Tensor& weights) {
  return cuda::kernels_take(rows.device(), rows.scalar_type()) && weights.scalar_type() == rows.scalar_type() &&
         weights.device() == rows.device() && rows.dim() == 2 && weights.dim() == 2 && rows.size(0) == weights.numel();
}

torch::Tensor weighted_combine(const torch::Tensor& rows, const torch::Tensor& row_of_choice,
                               const torch::Tensor& weights) {
  TORCH_CHECK(weighted_combine_takes(rows, weights), "weighted_combine: rows ", rows.sizes(), " (", rows.scalar_type(),
              " on ", rows.device(), ") and weights ", weights.sizes(), " (", weights.scalar_type(),
              ") are not for loom's kernel");
  TORCH_CHECK(row_of_choice.numel() == rows.size(0) && row_of_choice.device() == rows.device(),
              "weighted_combine: row_of_choice must hold one row per choice, on the rows' device");
  TORCH_CHECK(weights.size(0) <= std::numeric_limits<int32_t>::max(), "weighted_combine: ", weights.size(0),
              " tokens are more than one launch's blocks");
  return WeightedCombine::apply(rows, row_of_choice, weights);
}

}  // namespace loom::parallel
