#include "optim/adamw.h"

#include <cmath>

namespace loom::optim {

AdamW::AdamW(std::vector<torch::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
    decay_.push_back(p.dim() >= 2);
  }
}

void adamw_update(torch::Tensor p, const torch::Tensor& g, torch::Tensor m, torch::Tensor v, bool decay, double lr,
                  int64_t step, const AdamWOptions& options) {
  const double bias1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  if (decay && options.weight_decay != 0.0) p.mul_(1.0 - lr * options.weight_decay);
  m.mul_(options.beta1).add_(g, 1.0 - options.beta1);
  v.mul_(options.beta2).addcmul_(g, g, 1.0 - options.beta2);
  auto denom = (v.sqrt() / bias2_sqrt).add_(options.eps);
  p.addcdiv_(m, denom, -step_size);
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    adamw_update(p, p.grad(), exp_avg_[i], exp_avg_sq_[i], decay_[i], lr, steps_, options_);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    bytes += (exp_avg_[i].numel() + exp_avg_sq_[i].numel()) * static_cast<int64_t>(exp_avg_[i].element_size());
  }
  return bytes;
}

void AdamW::set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  exp_avg_[i].copy_(exp_avg);
  exp_avg_sq_[i].copy_(exp_avg_sq);
}

void AdamW::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace loom::optim
