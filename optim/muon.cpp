#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "parallel/layer_ownership.h"

namespace loom::optim {
namespace {

constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;

// The orthogonalised update of one logical matrix U (rows x cols), times Muon's RMS scale.
torch::Tensor orthogonal_update(const torch::Tensor& u, const MuonOptions& options) {
  const auto rows = u.size(0), cols = u.size(1);
  return newton_schulz(u, options.ns_steps, options.ns_dtype) *
         (0.2 * std::sqrt(static_cast<double>(std::max(rows, cols))));
}

}  // namespace

torch::Tensor newton_schulz(const torch::Tensor& x, int64_t steps, torch::ScalarType dtype) {
  TORCH_CHECK(x.dim() == 2, "newton_schulz takes a matrix");
  auto y = x.to(torch::kFloat);
  y = (y / (y.norm() + 1e-7)).to(dtype);
  const bool tall = y.size(0) > y.size(1);
  if (tall) y = y.t();
  for (int64_t i = 0; i < steps; ++i) {
    const auto a = y.matmul(y.t());
    const auto b = kB * a + kC * a.matmul(a);
    y = kA * y + b.matmul(y);
  }
  y = y.to(torch::kFloat);
  return tall ? y.t().contiguous() : y;
}

namespace {

std::vector<std::vector<int64_t>> shapes_of(const std::vector<torch::Tensor>& params) {
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : params) shapes.push_back(p.sizes().vec());
  return shapes;
}

}  // namespace

MuonCore::MuonCore(std::vector<std::vector<int64_t>> shapes, std::vector<MatrixSplit> splits, MuonOptions options,
                   MuonSharding sharding, torch::Device device)
    : shapes_(std::move(shapes)),
      splits_(std::move(splits)),
      options_(options),
      sharding_(std::move(sharding)),
      state_(torch::TensorOptions().dtype(torch::kFloat).device(device)) {
  if (splits_.size() != shapes_.size()) throw std::invalid_argument("Muon: one MatrixSplit per parameter");
  sharding_.tp_split_dim.resize(shapes_.size(), -1);
  if (!sharding_.tp || sharding_.tp->size() == 1) sharding_.tp_split_dim.assign(shapes_.size(), -1);
  std::vector<double> costs;
  for (size_t i = 0; i < shapes_.size(); ++i) {
    auto shape = shapes_[i];
    const auto& s = splits_[i];
    const auto dim = sharding_.tp_split_dim[i];
    if (shape.size() == 2 && dim >= 0) shape[static_cast<size_t>(dim)] *= sharding_.tp->size();
    if (shape.size() != 2 || shape[0] % (s.groups * s.parts) != 0) {
      throw std::invalid_argument("Muon: a parameter is not a matrix of " + std::to_string(s.groups * s.parts) +
                                  " row blocks");
    }
    costs.push_back(parallel::newton_schulz_cost(shape[0], shape[1], s.parts));
  }
  owner_ = sharding_.owners ? parallel::balance_owners(costs, sharding_.owners->size())
                            : std::vector<int64_t>(shapes_.size(), 0);
  momentum_.resize(shapes_.size());
  for (size_t i = 0; i < shapes_.size(); ++i) {
    if (owns(i)) momentum_[i] = torch::zeros(shapes_[i], state_);
  }
}

bool MuonCore::owns(size_t i) const {
  return !sharding_.owners || owner_[i] == sharding_.owners->rank();
}

torch::Tensor MuonCore::update(size_t i, const torch::Tensor& grad) {
  const double mu = options_.momentum;
  const auto g = grad.to(torch::kFloat);
  auto& b = momentum_[i];
  b.mul_(mu).add_(g);
  const auto u_part = options_.nesterov ? g + mu * b : b;
  const auto dim = sharding_.tp_split_dim[i];
  torch::Tensor u = u_part;
  const int64_t tp = dim >= 0 ? sharding_.tp->size() : 1;
  if (tp > 1) {
    // Every tp rank's part, in rank order along the split dimension: the weight whole.
    auto flat = torch::empty({tp * u_part.numel()}, u_part.options());
    sharding_.tp->all_gather(flat, u_part.contiguous().view({-1})).wait();
    const auto parts = flat.view({tp, u_part.size(0), u_part.size(1)});
    u = dim == 0 ? parts.reshape({tp * u_part.size(0), u_part.size(1)})
                 : parts.permute({1, 0, 2}).reshape({u_part.size(0), tp * u_part.size(1)});
  }
  const auto& s = splits_[i];
  const int64_t rows = u.size(0) / (s.groups * s.parts), cols = u.size(1);
  torch::Tensor update;
  const auto* whole =
      i < sharding_.whole_shape.size() && !sharding_.whole_shape[i].empty() ? &sharding_.whole_shape[i] : nullptr;
  if (dim >= 0 && whole && u.size(dim) > (*whole)[static_cast<size_t>(dim)]) {
    // Padding rows (or columns) past the real ones: orthogonalised without them, as one process would.
    const int64_t real = (*whole)[static_cast<size_t>(dim)];
    update = torch::zeros_like(u);
    update.narrow(dim, 0, real).copy_(orthogonal_update(u.narrow(dim, 0, real).contiguous(), options_));
  } else if (s.groups * s.parts == 1) {
    update = orthogonal_update(u, options_);
  } else {
    const auto blocks = u.view({s.groups, s.parts, rows, cols});
    update = torch::empty_like(blocks);
    for (int64_t part = 0; part < s.parts; ++part) {
      const auto matrix = blocks.select(1, part).reshape({s.groups * rows, cols});
      update.select(1, part).copy_(orthogonal_update(matrix, options_).view({s.groups, rows, cols}));
    }
    update = update.view({u.size(0), cols});
  }
  if (tp == 1) return update;
  const int64_t own = u_part.size(dim);
  return update.narrow(dim, sharding_.tp->rank() * own, own);
}

void MuonCore::gather_moments() {
  if (!sharding_.owners || sharding_.owners->size() == 1) return;
  gathered_.assign(shapes_.size(), torch::Tensor());
  std::vector<parallel::CommHandle> sends;
  for (size_t i = 0; i < shapes_.size(); ++i) {
    gathered_[i] = owns(i) ? momentum_[i] : torch::empty(shapes_[i], state_);
    sends.push_back(sharding_.owners->broadcast(gathered_[i], static_cast<int>(owner_[i])));
  }
  for (auto& h : sends) h.wait();
}

std::pair<torch::Tensor, torch::Tensor> MuonCore::moments(size_t i) const {
  const auto& b = owns(i) ? momentum_[i] : gathered_.at(i);
  TORCH_CHECK(b.defined(), "Muon::moments: gather_moments() first");
  // Muon has no second moment: zeros, so checkpoints keep the form AdamW gives them.
  return {b, torch::zeros_like(b)};
}

void MuonCore::set_moments(size_t i, const torch::Tensor& momentum) {
  if (owns(i)) momentum_[i].copy_(momentum);
}

int64_t MuonCore::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : momentum_) {
    if (b.defined()) bytes += b.numel() * static_cast<int64_t>(b.element_size());
  }
  return bytes;
}

Muon::Muon(std::vector<torch::Tensor> params, std::vector<MatrixSplit> splits, MuonOptions options,
           MuonSharding sharding)
    : MuonOptimizer(MuonCore(shapes_of(params), std::move(splits), options, std::move(sharding),
                             params.empty() ? torch::Device(torch::kCPU) : params.front().device())),
      params_(std::move(params)) {}

void Muon::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const auto& options = core_.options();
  const double group_lr = lr * options.lr_scale;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!core_.owns(i)) continue;
    auto& p = params_[i];
    const auto update = core_.update(i, p.grad());
    if (options.weight_decay > 0) p.mul_(1.0 - group_lr * options.weight_decay);
    p.add_(update.to(p.scalar_type()), -group_lr);
  }
  auto* owners = core_.sharding().owners;
  if (!owners || owners->size() == 1) return;
  std::vector<parallel::CommHandle> sends;
  for (size_t i = 0; i < params_.size(); ++i)
    sends.push_back(owners->broadcast(params_[i], static_cast<int>(core_.owner(i))));
  for (auto& h : sends) h.wait();
}

void Muon::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace loom::optim
