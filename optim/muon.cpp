#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace loom::optim {
namespace {

constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;

// The orthogonalised update of one logical matrix U (rows x cols), times Muon's RMS scale.
torch::Tensor orthogonal_update(const torch::Tensor& u, int64_t ns_steps) {
  const auto rows = u.size(0), cols = u.size(1);
  return newton_schulz(u, ns_steps) * (0.2 * std::sqrt(static_cast<double>(std::max(rows, cols))));
}

}  // namespace

torch::Tensor newton_schulz(const torch::Tensor& x, int64_t steps) {
  TORCH_CHECK(x.dim() == 2, "newton_schulz takes a matrix");
  auto y = x.to(torch::kFloat);
  y = y / (y.norm() + 1e-7);
  const bool tall = y.size(0) > y.size(1);
  if (tall) y = y.t();
  for (int64_t i = 0; i < steps; ++i) {
    const auto a = y.matmul(y.t());
    const auto b = kB * a + kC * a.matmul(a);
    y = kA * y + b.matmul(y);
  }
  return tall ? y.t().contiguous() : y;
}

Muon::Muon(std::vector<torch::Tensor> params, std::vector<MatrixSplit> splits, MuonOptions options)
    : params_(std::move(params)), splits_(std::move(splits)), options_(options) {
  if (splits_.size() != params_.size()) throw std::invalid_argument("Muon: one MatrixSplit per parameter");
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    const auto& s = splits_[i];
    if (p.dim() != 2 || p.size(0) % (s.groups * s.parts) != 0) {
      throw std::invalid_argument("Muon: a parameter is not a matrix of " + std::to_string(s.groups * s.parts) +
                                  " row blocks");
    }
    momentum_.push_back(torch::zeros_like(p, torch::kFloat));
  }
}

void Muon::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double mu = options_.momentum, group_lr = lr * options_.lr_scale;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    const auto g = p.grad().to(torch::kFloat);
    auto& b = momentum_[i];
    b.mul_(mu).add_(g);
    const auto u = options_.nesterov ? g + mu * b : b;
    const auto& s = splits_[i];
    const int64_t rows = p.size(0) / (s.groups * s.parts), cols = p.size(1);
    torch::Tensor update;
    if (s.groups * s.parts == 1) {
      update = orthogonal_update(u, options_.ns_steps);
    } else {
      const auto blocks = u.view({s.groups, s.parts, rows, cols});
      update = torch::empty_like(blocks);
      for (int64_t part = 0; part < s.parts; ++part) {
        const auto matrix = blocks.select(1, part).reshape({s.groups * rows, cols});
        update.select(1, part).copy_(orthogonal_update(matrix, options_.ns_steps).view({s.groups, rows, cols}));
      }
      update = update.view({p.size(0), cols});
    }
    if (options_.weight_decay > 0) p.mul_(1.0 - group_lr * options_.weight_decay);
    p.add_(update.to(p.scalar_type()), -group_lr);
  }
}

void Muon::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

std::pair<torch::Tensor, torch::Tensor> Muon::moments(size_t i) {
  return {momentum_[i], torch::zeros_like(momentum_[i])};
}

void Muon::set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& /*exp_avg_sq*/) {
  momentum_[i].copy_(exp_avg);
}

int64_t Muon::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : momentum_) bytes += b.numel() * static_cast<int64_t>(b.element_size());
  return bytes;
}

}  // namespace loom::optim
