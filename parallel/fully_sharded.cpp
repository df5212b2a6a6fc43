#include "parallel/fully_sharded.h"

#include <ATen/native/Resize.h>

#include <algorithm>
#include <limits>

#include "parallel/grad_hooks.h"

namespace loom::parallel {
namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

// Identity in forward; in backward, before the block's own backward runs, its
// parameters are gathered again (and the block before it prefetched).
class BackwardGate : public torch::autograd::Function<BackwardGate> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               FullyShardedParameters* owner, int64_t unit) {
    ctx->saved_data["owner"] = reinterpret_cast<int64_t>(owner);
    ctx->saved_data["unit"] = unit;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* owner = reinterpret_cast<FullyShardedParameters*>(ctx->saved_data["owner"].toInt());
    owner->before_backward(static_cast<size_t>(ctx->saved_data["unit"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

void resize_storage(const torch::Tensor& t, int64_t bytes) {
  at::native::resize_bytes_cpu(t.storage().unsafeGetStorageImpl(), static_cast<size_t>(bytes));
}

}  // namespace

FullyShardedParameters::~FullyShardedParameters() = default;

void FullyShardedParameters::shard(std::vector<torch::Tensor> params, const std::vector<int64_t>& block_of,
                                   Communicator& dp, bool shard_parameters, int64_t average_over,
                                   torch::ScalarType model_dtype) {
  TORCH_CHECK(!active(), "parameters are already sharded");
  params_ = std::move(params);
  dp_ = &dp;
  shard_parameters_ = shard_parameters;
  average_over_ = average_over > 0 ? average_over : dp.size();
  mixed_ = model_dtype != torch::kFloat;
  where_.assign(params_.size(), {0, 0});
  // The root unit first, then one unit per block in order of use.
  std::vector<std::vector<size_t>> groups(1);
  std::vector<int64_t> blocks{-1};
  for (size_t i = 0; i < params_.size(); ++i) {
    if (block_of[i] < 0) {
      groups[0].push_back(i);
    } else {
      if (blocks.back() != block_of[i]) {
        // A block's parameters are contiguous in order of use: a layer seen before would open a second unit.
        TORCH_CHECK(std::find(blocks.begin(), blocks.end(), block_of[i]) == blocks.end(),
                    "ZeRO units: the parameters of block ", block_of[i],
                    " are not contiguous, or two blocks share that layer");
        groups.emplace_back();
        blocks.push_back(block_of[i]);
      }
      groups.back().push_back(i);
    }
  }
  torch::NoGradGuard no_grad;
  const int64_t d = dp.size();
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) continue;
    Unit u;
    u.block = blocks[g];
    u.params = groups[g];
    std::vector<torch::Tensor> members;
    for (size_t i : u.params) members.push_back(params_[i]);
    u.flat = FlatLayout::of(members, d);
    u.shard_begin = u.flat.shard_begin(dp.rank());
    auto master = torch::zeros({u.flat.padded()}, params_[u.params.front()].options());
    for (size_t j = 0; j < u.params.size(); ++j) {
      u.flat.flat_view(master, j).copy_(params_[u.params[j]].detach().reshape({-1}));
      where_[u.params[j]] = {units_.size(), j};
    }
    u.full = mixed_ ? master.to(model_dtype) : master;
    for (size_t j = 0; j < u.params.size(); ++j) {
      auto& p = params_[u.params[j]];
      // The module keeps its parameter; its bytes move into the unit.
      p.set_data(u.flat.view(u.full, j, p.sizes()));
    }
    // ZeRO-3 (and mixed precision) keep the fp32 shard apart from the whole; ZeRO-2 in fp32
    // updates its part of the whole in place.
    u.shard = master.narrow(0, u.shard_begin, u.flat.shard_size());
    if (shard_parameters || mixed_) u.shard = u.shard.clone();
    u.shard_grad = torch::zeros({u.flat.shard_size()}, master.options());
    if (mixed_) {  // kept for master_views() (made while it has bytes), without its bytes
      u.full_master = master;
      master_views_.resize(params_.size());
      for (size_t j = 0; j < u.params.size(); ++j) {
        const auto& p = params_[u.params[j]];
        master_views_[u.params[j]] = u.flat.view(master, j, p.sizes());
      }
      resize_storage(u.full_master, 0);
    }
    u.gathered = true;
    units_.push_back(std::move(u));
    release(units_.size() - 1);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    accumulators_.push_back(after_gradient_accumulated(params_[i], [this, i] { gradient_arrived(i); }));
  }
}

size_t FullyShardedParameters::unit_of_block(int64_t layer) const {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].block == layer && layer >= 0) return u;
  }
  return kNone;
}

void FullyShardedParameters::launch_gather(size_t unit) {
  auto& u = units_[unit];
  if (u.gathered || u.gathering) return;
  resize_storage(u.full, u.full.numel() * static_cast<int64_t>(u.full.element_size()));
  if (mixed_) u.wire = u.shard.to(u.full.scalar_type());
  u.gather = dp_->all_gather(u.full, mixed_ ? u.wire : u.shard);
  u.gathering = true;
}

void FullyShardedParameters::wait_gathered(size_t unit) {
  auto& u = units_[unit];
  if (u.gathered) return;
  launch_gather(unit);
  u.gather.wait();
  u.wire = torch::Tensor();
  u.gathering = false;
  u.gathered = true;
}

void FullyShardedParameters::release(size_t unit) {
  auto& u = units_[unit];
  if (!u.gathered || !shard_parameters_) return;
  resize_storage(u.full, 0);
  u.gathered = false;
}

torch::Tensor FullyShardedParameters::run(int64_t layer, const std::function<torch::Tensor()>& forward) {
  if (!inner_) return run_unit(layer, forward);
  return run_unit(layer, [&] { return inner_->run(layer, forward); });
}

torch::Tensor FullyShardedParameters::run_unit(int64_t layer, const std::function<torch::Tensor()>& forward) {
  const size_t unit = active() ? unit_of_block(layer) : kNone;
  if (unit == kNone) return forward();  // nothing of this block is sharded here (a dense block's experts)
  wait_gathered(unit);
  const size_t next = unit_of_block(layer + 1);
  if (next != kNone) launch_gather(next);  // overlaps this block's compute
  auto out = forward();
  release(unit);
  if (!out.requires_grad()) return out;
  return BackwardGate::apply(out, this, static_cast<int64_t>(unit));
}

void FullyShardedParameters::before_backward(size_t unit) {
  auto& u = units_[unit];
  if (hold_for_step_ && u.block >= 0) {
    // The next block's backward is done (its W passes do not need its parameters).
    const size_t next = unit_of_block(u.block + 1);
    if (next != kNone) release(next);
  }
  // The previous micro-batch's reduction of this unit (1F1B runs a stage's only block twice in a row).
  if (u.reducing) finish_reduce(unit);
  wait_gathered(unit);
  const size_t previous = unit_of_block(u.block - 1);
  if (previous != kNone) launch_gather(previous);
  if (hold_for_step_ && u.full_grad.defined()) return;  // gradients accumulate over the step
  // This micro-batch's gradients accumulate into a flat buffer that is reduce-scattered when
  // complete: autograd adds into it directly, or under mixed precision each gradient is added
  // in fp32 when it arrives (gradient_arrived).
  u.full_grad = torch::zeros({u.full.numel()}, u.shard.options());
  for (size_t j = 0; j < u.params.size() && !mixed_; ++j) {
    auto& p = params_[u.params[j]];
    p.mutable_grad() = u.flat.view(u.full_grad, j, p.sizes());
  }
  u.pending = static_cast<int64_t>(u.params.size());
}

void FullyShardedParameters::gradient_arrived(size_t param) {
  const auto [unit, j] = where_[param];
  auto& u = units_[unit];
  if (mixed_) {
    auto& p = params_[param];
    if (p.grad().defined()) {
      torch::NoGradGuard no_grad;
      u.flat.flat_view(u.full_grad, j).add_(p.grad().reshape({-1}));
      p.mutable_grad() = torch::Tensor();  // the next micro-batch's gradient is taken as it comes
    }
  }
  if (u.block < 0 || hold_for_step_) return;  // reduced in finish()
  if (--u.pending == 0) {
    // Every use of the block's parameters in this backward is done: their bytes can go.
    release(unit);
    reduce(unit);
  }
}

void FullyShardedParameters::reduce(size_t unit) {
  // One reduce-scatter in flight: its gradient buffer is freed before the next one is sent.
  for (size_t other = 0; other < units_.size(); ++other) {
    if (units_[other].reducing) finish_reduce(other);
  }
  auto& u = units_[unit];
  u.reduced = torch::empty({u.flat.shard_size()}, u.full_grad.options());
  u.reduce = dp_->reduce_scatter(u.reduced, u.full_grad);
  u.reducing = true;
}

void FullyShardedParameters::finish_reduce(size_t unit) {
  auto& u = units_[unit];
  u.reduce.wait();
  u.reducing = false;
  torch::NoGradGuard no_grad;
  u.shard_grad.add_(u.reduced);
  for (size_t i : u.params) params_[i].mutable_grad() = torch::Tensor();
  u.full_grad = torch::Tensor();
  u.reduced = torch::Tensor();
}

void FullyShardedParameters::start_step() {
  if (!active() || units_.empty()) return;  // (a stage whose blocks have no experts)
  for (auto& u : units_) u.shard_grad.zero_();
  if (units_.front().block < 0) {
    wait_gathered(0);
    before_backward(0);  // the root's gradients accumulate over the whole step
  }
}

void FullyShardedParameters::finish() {
  if (!active() || units_.empty()) return;
  if (units_.front().block < 0 && units_.front().full_grad.defined()) reduce(0);
  for (size_t unit = 0; unit < units_.size() && hold_for_step_; ++unit) {
    // One in flight at a time: reduce() waits for the one before.
    if (units_[unit].block >= 0 && units_[unit].full_grad.defined()) reduce(unit);
  }
  const double scale = 1.0 / static_cast<double>(average_over_);
  torch::NoGradGuard no_grad;
  for (size_t unit = 0; unit < units_.size(); ++unit) {
    auto& u = units_[unit];
    if (u.reducing) finish_reduce(unit);
    if (u.gathering) wait_gathered(unit);  // a prefetch nobody used
    release(unit);
    u.shard_grad.mul_(scale);
  }
}

std::vector<torch::Tensor> FullyShardedParameters::shard_grad_pieces(const std::function<bool(size_t)>& keep) const {
  std::vector<torch::Tensor> pieces;
  for (const auto& u : units_) {
    for (size_t j = 0; j < u.params.size(); ++j) {
      const auto [begin, end] = u.flat.in_shard(j, u.shard_begin);
      if (begin < end && keep(u.params[j]))
        pieces.push_back(u.shard_grad.narrow(0, begin - u.shard_begin, end - begin));
    }
  }
  return pieces;
}

void FullyShardedParameters::gather_updated() {
  if (!active() || shard_parameters_) return;
  std::vector<CommHandle> gathers;
  std::vector<torch::Tensor> inputs;  // the shards are views of the outputs: sent from copies
  for (auto& u : units_) {
    inputs.push_back(u.shard.to(u.full.scalar_type(), /*non_blocking=*/false, /*copy=*/true));
    gathers.push_back(dp_->all_gather(u.full, inputs.back()));
  }
  for (auto& g : gathers) g.wait();
}

torch::Tensor FullyShardedParameters::gradient_of(size_t i) const {
  const auto [unit, j] = where_[i];
  const auto& g = units_[unit].full_grad;
  return g.defined() ? units_[unit].flat.view(g, j, params_[i].sizes()) : torch::Tensor();
}

void FullyShardedParameters::gather_all() {
  for (size_t unit = 0; unit < units_.size(); ++unit) launch_gather(unit);
  for (size_t unit = 0; unit < units_.size(); ++unit) wait_gathered(unit);
  if (!mixed_) return;
  // Checkpoints read and write the fp32 master weights.
  std::vector<CommHandle> gathers;
  for (auto& u : units_) {
    resize_storage(u.full_master, u.full_master.numel() * static_cast<int64_t>(u.full_master.element_size()));
    gathers.push_back(dp_->all_gather(u.full_master, u.shard));
  }
  for (auto& g : gathers) g.wait();
}

void FullyShardedParameters::release_all(bool take_values) {
  torch::NoGradGuard no_grad;
  for (size_t unit = 0; unit < units_.size(); ++unit) {
    auto& u = units_[unit];
    const auto& whole = mixed_ ? u.full_master : u.full;
    if (take_values && u.gathered && (shard_parameters_ || mixed_)) {
      u.shard.copy_(whole.narrow(0, u.shard_begin, u.flat.shard_size()));
      if (!shard_parameters_) u.full.copy_(whole);  // ZeRO-2: the whole parameters stay
    }
    if (mixed_) resize_storage(u.full_master, 0);
    release(unit);
  }
}

}  // namespace loom::parallel
