#include "parallel/process_groups.h"

#include <algorithm>
#include <numeric>

namespace loom::parallel {

ProcessGroups::ProcessGroups(const RankGrid& grid, int64_t rank, const CommunicatorFactory& factory,
                             std::shared_ptr<CommStats> stats)
    : grid_(grid), rank_(rank), coords_(grid.coords(rank)), stats_(std::move(stats)) {
  std::vector<int64_t> everyone(static_cast<size_t>(grid.world()));
  std::iota(everyone.begin(), everyone.end(), 0);
  world_ = make("world", "world", everyone, factory);
  for (GroupKind kind : kAllGroupKinds) {
    if (aliased(kind)) continue;
    const auto all = grid.groups(kind);
    for (size_t index = 0; index < all.size(); ++index) {
      if (std::find(all[index].begin(), all[index].end(), rank) == all[index].end()) continue;
      const std::string name = group_kind_name(kind);
      groups_[kind] = make(name, name + "/" + std::to_string(index), all[index], factory);
    }
  }
}

std::unique_ptr<Communicator> ProcessGroups::make(const std::string& name, const std::string& key,
                                                  const std::vector<int64_t>& ranks,
                                                  const CommunicatorFactory& factory) {
  if (ranks.size() == 1) return std::make_unique<SelfCommunicator>(name, rank_, stats_);
  TORCH_CHECK(factory, "a group of several ranks needs a communicator factory");
  const int rank_in_group = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  return factory(name, key, ranks, rank_in_group);
}

GroupKind ProcessGroups::without_cp(GroupKind kind) {
  if (kind == GroupKind::dp_cp) return GroupKind::dp;
  if (kind == GroupKind::expert_dp_cp) return GroupKind::expert_dp;
  return kind;
}

Communicator& ProcessGroups::get(GroupKind kind) {
  if (aliased(kind)) kind = without_cp(kind);
  auto it = groups_.find(kind);
  TORCH_CHECK(it != groups_.end(), "rank ", rank_, " is not in any ", group_kind_name(kind), " group");
  return *it->second;
}

}  // namespace loom::parallel
