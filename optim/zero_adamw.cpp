#include "optim/zero_adamw.h"

namespace loom::optim {

ZeroAdamW::ZeroAdamW(std::vector<torch::Tensor> params, parallel::GradientBuckets& buckets, parallel::Communicator& dp,
                     AdamWOptions options, std::vector<bool> left_alone)
    : params_(std::move(params)), left_alone_(std::move(left_alone)), buckets_(buckets), dp_(dp), options_(options) {
  left_alone_.resize(params_.size(), false);
  torch::NoGradGuard no_grad;
  where_.resize(params_.size());
  for (const auto& p : params_) decay_.push_back(p.dim() >= 2);
  for (size_t b = 0; b < static_cast<size_t>(buckets.num_buckets()); ++b) {
    const auto& l = buckets.layout(b);
    Shard shard;
    shard.params = torch::zeros_like(l.buffer);
    for (size_t j = 0; j < l.params.size(); ++j) {
      auto& p = params_[l.params[j]];
      auto view = l.flat.flat_view(shard.params, j);
      view.copy_(p.detach().reshape({-1}));
      // The module keeps its parameter; only the storage moves into the flat buffer.
      p.set_data(view.view(p.sizes()));
      where_[l.params[j]] = {b, j};
    }
    shard.exp_avg = torch::zeros({l.flat.shard_size()}, l.buffer.options());
    shard.exp_avg_sq = torch::zeros({l.flat.shard_size()}, l.buffer.options());
    shards_.push_back(std::move(shard));
  }
}

void ZeroAdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  std::vector<parallel::CommHandle> gathers;
  std::vector<torch::Tensor> inputs;
  for (size_t b = 0; b < shards_.size(); ++b) {
    const auto& l = buckets_.layout(b);
    auto& s = shards_[b];
    const int64_t lo = l.shard_begin;
    // Each parameter's piece inside this rank's shard, updated exactly as AdamW would update it.
    for (size_t j = 0; j < l.params.size(); ++j) {
      const auto [begin, end] = l.flat.in_shard(j, lo);
      if (begin >= end || left_alone_[l.params[j]]) continue;
      adamw_update(s.params.narrow(0, begin, end - begin), l.buffer.narrow(0, begin, end - begin),
                   s.exp_avg.narrow(0, begin - lo, end - begin), s.exp_avg_sq.narrow(0, begin - lo, end - begin),
                   decay_[l.params[j]], lr, steps_, options_);
    }
    inputs.push_back(s.params.narrow(0, lo, l.flat.shard_size()).clone());
    gathers.push_back(dp_.all_gather(s.params, inputs.back()));
  }
  for (auto& g : gathers) g.wait();
}

void ZeroAdamW::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

void ZeroAdamW::gather_moments() {
  for (auto& s : shards_) {
    s.full_exp_avg = torch::empty_like(s.params);
    s.full_exp_avg_sq = torch::empty_like(s.params);
    dp_.all_gather(s.full_exp_avg, s.exp_avg).wait();
    dp_.all_gather(s.full_exp_avg_sq, s.exp_avg_sq).wait();
  }
}

void ZeroAdamW::release_moments() {
  for (auto& s : shards_) s.full_exp_avg = s.full_exp_avg_sq = torch::Tensor();
}

std::pair<torch::Tensor, torch::Tensor> ZeroAdamW::moments(size_t i) {
  const auto [b, j] = where_[i];
  const auto& s = shards_[b];
  TORCH_CHECK(s.full_exp_avg.defined(), "ZeroAdamW::moments needs gather_moments() first");
  const auto& flat = buckets_.layout(b).flat;
  const auto& p = params_[i];
  return {flat.view(s.full_exp_avg, j, p.sizes()), flat.view(s.full_exp_avg_sq, j, p.sizes())};
}

void ZeroAdamW::set_moments(size_t i, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  const auto [b, j] = where_[i];
  const auto& l = buckets_.layout(b);
  auto& s = shards_[b];
  const int64_t lo = l.shard_begin, offset = l.flat.offset(j);
  const auto [begin, end] = l.flat.in_shard(j, lo);
  if (begin >= end) return;
  s.exp_avg.narrow(0, begin - lo, end - begin).copy_(exp_avg.reshape({-1}).narrow(0, begin - offset, end - begin));
  s.exp_avg_sq.narrow(0, begin - lo, end - begin)
      .copy_(exp_avg_sq.reshape({-1}).narrow(0, begin - offset, end - begin));
}

int64_t ZeroAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : shards_) bytes += (s.exp_avg.numel() + s.exp_avg_sq.numel()) * 4;
  return bytes;
}

}  // namespace loom::optim
