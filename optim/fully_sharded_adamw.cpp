#include "optim/fully_sharded_adamw.h"

namespace loom::optim {

FullyShardedAdamW::FullyShardedAdamW(parallel::FullyShardedParameters& sharded, parallel::Communicator& dp,
                                     AdamWOptions options, std::vector<bool> left_alone)
    : sharded_(sharded), dp_(dp), options_(options), left_alone_(std::move(left_alone)) {
  left_alone_.resize(sharded.params().size(), false);
  for (const auto& p : sharded.params()) decay_.push_back(p.dim() >= 2);
  for (const auto& u : sharded.units()) {
    exp_avg_.push_back(torch::zeros_like(u.shard));
    exp_avg_sq_.push_back(torch::zeros_like(u.shard));
  }
}

template <typename F>
void FullyShardedAdamW::for_each_piece(F f) const {
  const auto& units = sharded_.units();
  for (size_t unit = 0; unit < units.size(); ++unit) {
    const auto& u = units[unit];
    for (size_t j = 0; j < u.params.size(); ++j) {
      const auto [begin, end] = u.flat.in_shard(j, u.shard_begin);
      if (begin < end) f(unit, u.params[j], begin, end);
    }
  }
}

void FullyShardedAdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  auto& units = sharded_.units();
  for_each_piece([&](size_t unit, size_t param, int64_t begin, int64_t end) {
    if (left_alone_[param]) return;
    auto& u = units[unit];
    const int64_t at = begin - u.shard_begin, n = end - begin;
    adamw_update(u.shard.narrow(0, at, n), u.shard_grad.narrow(0, at, n), exp_avg_[unit].narrow(0, at, n),
                 exp_avg_sq_[unit].narrow(0, at, n), decay_[param], lr, steps_, options_);
  });
}

void FullyShardedAdamW::zero_grad() {
  for (auto& u : sharded_.units()) u.shard_grad.zero_();
}

void FullyShardedAdamW::gather_moments() {
  full_exp_avg_.clear();
  full_exp_avg_sq_.clear();
  const auto& units = sharded_.units();
  for (size_t unit = 0; unit < units.size(); ++unit) {
    const int64_t padded = units[unit].flat.padded();
    full_exp_avg_.push_back(torch::empty({padded}, exp_avg_[unit].options()));
    full_exp_avg_sq_.push_back(torch::empty({padded}, exp_avg_[unit].options()));
    dp_.all_gather(full_exp_avg_.back(), exp_avg_[unit]).wait();
    dp_.all_gather(full_exp_avg_sq_.back(), exp_avg_sq_[unit]).wait();
  }
}

void FullyShardedAdamW::release_moments() {
  full_exp_avg_.clear();
  full_exp_avg_sq_.clear();
}

std::pair<torch::Tensor, torch::Tensor> FullyShardedAdamW::moments(size_t i) {
  TORCH_CHECK(!full_exp_avg_.empty(), "FullyShardedAdamW::moments needs gather_moments() first");
  const auto [unit, j] = sharded_.where(i);
  const auto& flat = sharded_.units()[unit].flat;
  const auto& p = sharded_.params()[i];
  return {flat.view(full_exp_avg_[unit], j, p.sizes()), flat.view(full_exp_avg_sq_[unit], j, p.sizes())};
}

void FullyShardedAdamW::set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  const auto [unit, j] = sharded_.where(i);
  const auto& u = sharded_.units()[unit];
  const int64_t lo = u.shard_begin, offset = u.flat.offset(j);
  const auto [begin, end] = u.flat.in_shard(j, lo);
  if (begin >= end) return;
  exp_avg_[unit].narrow(0, begin - lo, end - begin).copy_(exp_avg.reshape({-1}).narrow(0, begin - offset, end - begin));
  exp_avg_sq_[unit]
      .narrow(0, begin - lo, end - begin)
      .copy_(exp_avg_sq.reshape({-1}).narrow(0, begin - offset, end - begin));
}

int64_t FullyShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t unit = 0; unit < exp_avg_.size(); ++unit) {
    bytes += (exp_avg_[unit].numel() + exp_avg_sq_[unit].numel()) * static_cast<int64_t>(exp_avg_[unit].element_size());
  }
  return bytes;
}

}  // namespace loom::optim
