#include "optim/unit_sharded_muon.h"

#include <map>

namespace loom::optim {
namespace {

std::vector<std::vector<int64_t>> shapes_of(const parallel::FullyShardedParameters& sharded,
                                            const std::vector<size_t>& weights) {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i : weights) shapes.push_back(sharded.params()[i].sizes().vec());
  return shapes;
}

MuonSharding owned_over(MuonSharding sharding, parallel::Communicator& group) {
  sharding.owners = &group;
  return sharding;
}

}  // namespace

UnitShardedMuon::UnitShardedMuon(parallel::FullyShardedParameters& sharded, parallel::Communicator& group,
                                 std::vector<size_t> weights, std::vector<MatrixSplit> splits, MuonOptions options,
                                 MuonSharding sharding)
    : MuonOptimizer(
          MuonCore(shapes_of(sharded, weights), std::move(splits), options, owned_over(std::move(sharding), group),
                   sharded.units().empty() ? torch::Device(torch::kCPU) : sharded.units().front().shard.device())),
      sharded_(sharded),
      group_(group),
      weights_(std::move(weights)) {
  std::map<size_t, std::vector<std::pair<size_t, size_t>>> units;
  for (size_t k = 0; k < weights_.size(); ++k) {
    const auto [unit, j] = sharded.where(weights_[k]);
    units[unit].emplace_back(k, j);
  }
  for (auto& [unit, list] : units) by_unit_.emplace_back(unit, std::move(list));
}

void UnitShardedMuon::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const auto& options = core_.options();
  const double group_lr = lr * options.lr_scale;
  for (const auto& [unit_index, list] : by_unit_) {
    auto& u = sharded_.units()[unit_index];
    const auto& flat = u.flat;
    auto grads = torch::empty({flat.padded()}, u.shard_grad.options());
    group_.all_gather(grads, u.shard_grad).wait();
    auto updates = torch::zeros_like(grads);
    for (const auto& [k, j] : list) {
      if (!core_.owns(k)) continue;
      const auto sizes = sharded_.params()[weights_[k]].sizes();
      flat.view(updates, j, sizes).copy_(core_.update(k, flat.view(grads, j, sizes)));
    }
    auto mine = torch::empty({flat.shard_size()}, updates.options());
    group_.reduce_scatter(mine, updates).wait();
    for (const auto& [k, j] : list) {
      const auto [begin, end] = flat.in_shard(j, u.shard_begin);
      if (begin >= end) continue;
      auto piece = u.shard.narrow(0, begin - u.shard_begin, end - begin);
      if (options.weight_decay > 0) piece.mul_(1.0 - group_lr * options.weight_decay);
      piece.add_(mine.narrow(0, begin - u.shard_begin, end - begin), -group_lr);
    }
  }
}

}  // namespace loom::optim
