#include "parallel/master_weights.h"

#include "core/cuda_kernel_args.h"
#include "parallel/grad_hooks.h"

namespace loom::parallel {
MasterWeights::MasterWeights(std::vector<torch::Tensor> model, torch::ScalarType dtype) : model_(std::move(model)) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    auto& p = model_[i];
    TORCH_CHECK(p.scalar_type() == torch::kFloat, "master weights start from fp32 parameters");
    // A fresh fp32 tensor that does not require grad: autograd never reaches it.
    auto master = p.detach().clone();
    master.mutable_grad() = torch::zeros_like(master);
    masters_.push_back(master);
    // The module keeps its parameter object; only its data becomes DTYPE.
    p.set_data(master.to(dtype));
    accumulators_.push_back(after_gradient_accumulated(p, [this, i] { on_gradient(i); }));
  }
}

void MasterWeights::on_gradient(size_t i) {
  auto& p = model_[i];
  if (!p.grad().defined()) return;
  torch::NoGradGuard no_grad;
  auto& sum = masters_[i].mutable_grad();
  const auto& grad = p.grad();
  if (cuda::kernels_take(grad.device(), grad.scalar_type()) && sum.is_contiguous() && grad.is_contiguous() &&
      sum.sizes() == grad.sizes()) {
    // One vectorised pass (core/cuda_kernels/accumulate.cu): the same fp32 sums as add_'s.
    const c10::DeviceGuard guard(grad.device());
    cuda::accumulate_fp32(sum.data_ptr<float>(), grad.data_ptr(), grad.numel(), *cuda::storage_of(grad.scalar_type()),
                          cuda::current_stream(grad.device()));
  } else {
    sum.add_(grad);
  }
  // Dropped, not zeroed: the next micro-batch's AccumulateGrad then takes its
  // incoming gradient as it is instead of adding into a low-precision buffer.
  p.mutable_grad() = torch::Tensor();
  if (listener_) listener_(i);
}

torch::Tensor MasterWeights::master_of(const torch::Tensor& model_param) const {
  for (size_t i = 0; i < model_.size(); ++i) {
    if (model_[i].is_same(model_param)) return masters_[i];
  }
  return {};
}

void MasterWeights::copy_to_model() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) model_[i].copy_(masters_[i]);
}

int64_t MasterWeights::model_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : model_) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

int64_t MasterWeights::master_bytes() const {
  int64_t bytes = 0;
  for (const auto& m : masters_) bytes += m.numel() * static_cast<int64_t>(m.element_size());
  return bytes;
}

}  // namespace loom::parallel
