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

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double bias1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    const auto& g = p.grad();
    if (decay_[i] && options_.weight_decay != 0.0) p.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].mul_(options_.beta1).add_(g, 1.0 - options_.beta1);
    exp_avg_sq_[i].mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    auto denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

void AdamW::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace loom::optim
