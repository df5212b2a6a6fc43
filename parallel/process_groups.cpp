#include "parallel/process_groups.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "parallel/hierarchical_communicator.h"
#include "parallel/hsdp_communicator.h"

namespace loom::parallel {

ProcessGroups::ProcessGroups(const RankGrid& grid, int64_t rank, const CommunicatorFactory& factory,
                             std::shared_ptr<CommStats> stats)
    : grid_(grid), rank_(rank), coords_(grid.coords(rank)), stats_(std::move(stats)) {
  // Before any rendezvous: every rank refuses an uneven cut alike.
  grid.require_even_hsdp();
  std::vector<int64_t> everyone(static_cast<size_t>(grid.world()));
  std::iota(everyone.begin(), everyone.end(), 0);
  world_ = make("world", "world", everyone, factory);
  // Each of this rank's groups: its key (the kind's name and the group's index) and its ranks.
  std::map<GroupKind, std::pair<std::string, std::vector<int64_t>>> mine;
  for (GroupKind kind : kAllGroupKinds) {
    if (aliased(kind)) continue;
    const auto all = grid.groups(kind);
    for (size_t index = 0; index < all.size(); ++index) {
      if (std::find(all[index].begin(), all[index].end(), rank) == all[index].end()) continue;
      const std::string name = group_kind_name(kind);
      mine[kind] = {name + "/" + std::to_string(index), all[index]};
      groups_[kind] = make(name, mine[kind].first, all[index], factory);
    }
  }
  if (grid.hsdp()) {
    for (auto [shard, replicate] : {std::pair{GroupKind::dp_shard, GroupKind::dp_replicate},
                                    std::pair{GroupKind::expert_dp_shard, GroupKind::expert_dp_replicate}}) {
      // Over Gloo the replica steps run on a thread of their own, with a second communicator over
      // the shard group's ranks for the gathers among them (parallel/later_steps.h).
      std::unique_ptr<Communicator> shard_later;
      if (runs_later_steps_on_thread(get(shard)) && runs_later_steps_on_thread(get(replicate))) {
        const auto& [key, ranks] = mine.at(shard);
        shard_later = make(group_kind_name(shard), key + "/later", ranks, factory);
      }
      hsdp_[shard] = std::make_unique<HsdpCommunicator>(get(shard), get(replicate), std::move(shard_later), stats_);
    }
  }
}

bool ProcessGroups::runs_later_steps_on_thread(const Communicator& comm) {
  return comm.backend() != "nccl";
}

std::unique_ptr<Communicator> ProcessGroups::make(const std::string& name, const std::string& key,
                                                  const std::vector<int64_t>& ranks,
                                                  const CommunicatorFactory& factory) {
  if (ranks.size() == 1) return std::make_unique<SelfCommunicator>(name, rank_, stats_);
  TORCH_CHECK(factory, "a group of several ranks needs a communicator factory");
  const int rank_in_group = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  return factory(name, key, ranks, rank_in_group);
}

void ProcessGroups::use_two_level_gradient_groups(const std::vector<int64_t>& node_of_rank,
                                                  const CommunicatorFactory& factory) {
  std::set<GroupKind> done;
  for (GroupKind gradient_kind : {GroupKind::dp_cp, GroupKind::expert_dp_cp}) {
    const GroupKind kind = resolve(gradient_kind);
    if (!done.insert(kind).second) continue;
    const auto all = grid_.groups(kind);
    for (size_t index = 0; index < all.size(); ++index) {
      const auto& group = all[index];
      const GroupLevels levels = group_levels(group, node_of_rank);
      if (!levels.even()) {
        std::string counts;
        for (size_t n = 0; n < levels.nodes.size(); ++n) {
          counts += (n ? ", " : "") + std::to_string(levels.nodes[n].size()) + " on node " +
                    std::to_string(node_of_rank.at(static_cast<size_t>(group[levels.nodes[n].front()])));
        }
        std::string members;
        for (size_t i = 0; i < group.size(); ++i) members += (i ? ", " : "") + std::to_string(group[i]);
        throw InputError(
            "config key 'parallel.dp_collectives': hierarchical needs every node to hold as many ranks "
            "of each data-parallel group, but the " +
            group_kind_name(kind) + " group of global ranks [" + members + "] has " + counts +
            " (see parallel.ranks_per_node and parallel.order, or use flat)");
      }
      const auto me = std::find(group.begin(), group.end(), rank_);
      if (me == group.end() || group.size() == 1) continue;
      const int position = static_cast<int>(me - group.begin());
      size_t node = 0, place = 0;
      for (size_t n = 0; n < levels.nodes.size(); ++n) {
        const auto& members = levels.nodes[n];
        const auto at = std::find(members.begin(), members.end(), position);
        if (at != members.end()) node = n, place = static_cast<size_t>(at - members.begin());
      }
      const auto ranks_at = [&](const std::vector<int>& positions) {
        std::vector<int64_t> ranks;
        for (int p : positions) ranks.push_back(group[static_cast<size_t>(p)]);
        return ranks;
      };
      const std::string name = group_kind_name(kind), key = name + "/" + std::to_string(index);
      // The node's subgroup first on every rank, then the one across nodes: each waits only for its own members.
      auto intra =
          make(name + " (inside node)", key + "/node" + std::to_string(node), ranks_at(levels.nodes[node]), factory);
      auto inter = make(name + " (across nodes)", key + "/place" + std::to_string(place),
                        ranks_at(levels.at_place(place)), factory);
      // Over Gloo the later steps run on a thread of their own, on communicators of their own
      // (parallel/later_steps.h); made in the same order on every rank, after both levels.
      std::unique_ptr<Communicator> intra_later, inter_later;
      if (runs_later_steps_on_thread(*groups_.at(kind))) {
        intra_later = make(name + " (inside node)", key + "/node" + std::to_string(node) + "/later",
                           ranks_at(levels.nodes[node]), factory);
        inter_later = make(name + " (across nodes)", key + "/place" + std::to_string(place) + "/later",
                           ranks_at(levels.at_place(place)), factory);
      }
      groups_[kind] =
          std::make_unique<HierarchicalCommunicator>(std::move(groups_.at(kind)), std::move(intra), std::move(inter),
                                                     levels, stats_, std::move(intra_later), std::move(inter_later));
    }
  }
}

GroupKind ProcessGroups::resolve(GroupKind kind) const {
  if (!grid_.hsdp() && kind == GroupKind::dp_shard) kind = GroupKind::dp_cp;
  if (!grid_.hsdp() && kind == GroupKind::expert_dp_shard) kind = GroupKind::expert_dp_cp;
  if (grid_.sizes().cp == 1 && kind == GroupKind::dp_cp) return GroupKind::dp;
  if (grid_.sizes().cp == 1 && kind == GroupKind::expert_dp_cp) return GroupKind::expert_dp;
  return kind;
}

std::vector<Communicator*> ProcessGroups::hsdp_later_communicators() const {
  std::vector<Communicator*> later;
  for (const auto& [kind, hsdp] : hsdp_) {
    if (auto* comm = static_cast<HsdpCommunicator&>(*hsdp).shard_later()) later.push_back(comm);
  }
  return later;
}

Communicator& ProcessGroups::sharded_gradients(GroupKind shard_kind) {
  auto it = hsdp_.find(shard_kind);
  return it != hsdp_.end() ? *it->second : get(shard_kind);
}

Communicator& ProcessGroups::get(GroupKind kind) {
  kind = resolve(kind);
  auto it = groups_.find(kind);
  TORCH_CHECK(it != groups_.end(), "rank ", rank_, " is not in any ", group_kind_name(kind), " group");
  return *it->second;
}

}  // namespace loom::parallel
