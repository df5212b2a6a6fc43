// The process groups this rank belongs to, built from the rank grid: one
// communicator per group kind, plus the world. Groups are created in a fixed
// kind order on every rank, so each group's members meet at its rendezvous.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/rank_grid.h"

namespace loom::parallel {

// Makes the communicator of a group of two or more ranks. KEY is unique to the
// group across the job (for its rendezvous); RANKS are global, in group order.
using CommunicatorFactory = std::function<std::unique_ptr<Communicator>(
    const std::string& name, const std::string& key, const std::vector<int64_t>& ranks, int rank_in_group)>;

class ProcessGroups {
 public:
  // With a null FACTORY every group must have one rank (world 1).
  ProcessGroups(const RankGrid& grid, int64_t rank, const CommunicatorFactory& factory,
                std::shared_ptr<CommStats> stats = std::make_shared<CommStats>());

  int64_t rank() const { return rank_; }
  int64_t world() const { return grid_.world(); }
  const RankGrid& grid() const { return grid_; }
  const RankCoords& coords() const { return coords_; }
  const std::shared_ptr<CommStats>& stats() const { return stats_; }

  Communicator& world_comm() { return *world_; }
  Communicator& get(GroupKind kind);
  bool has(GroupKind kind) const { return groups_.count(resolve(kind)) > 0; }
  Communicator& tp() { return get(GroupKind::tp); }
  Communicator& cp() { return get(GroupKind::cp); }
  // The groups gradients are averaged over (dp, or expert-dp, times cp).
  Communicator& dp_cp() { return get(GroupKind::dp_cp); }
  Communicator& expert_dp_cp() { return get(GroupKind::expert_dp_cp); }
  Communicator& pp() { return get(GroupKind::pp); }
  Communicator& dp() { return get(GroupKind::dp); }
  Communicator& ep() { return get(GroupKind::ep); }
  Communicator& expert_dp() { return get(GroupKind::expert_dp); }
  Communicator& model_parallel() { return get(GroupKind::model_parallel); }
  // ZeRO's shard groups: under HSDP (parallel.dp_shard) part of dp-cp (expert-dp-cp), else all of it.
  Communicator& dp_shard() { return get(GroupKind::dp_shard); }
  Communicator& expert_dp_shard() { return get(GroupKind::expert_dp_shard); }
  // The groups ZeRO reduces its gradients over: the shard group, whose reductions under HSDP also
  // sum over the replicas (parallel/hsdp_communicator.h); without HSDP the dp-cp (expert-dp-cp)
  // group itself. Sums over all of dp: averages divide by dp_cp().size().
  Communicator& dp_shard_gradients() { return sharded_gradients(GroupKind::dp_shard); }
  Communicator& expert_dp_shard_gradients() { return sharded_gradients(GroupKind::expert_dp_shard); }
  // HSDP's second communicators over the shard groups' ranks (its gathers run there on a thread
  // of their own over Gloo); none without HSDP or over NCCL.
  std::vector<Communicator*> hsdp_later_communicators() const;

  // parallel.dp_collectives: hierarchical. The gradient groups (dp and expert-dp, times cp) run
  // their all-reduce, reduce-scatter and all-gather in two levels, inside each node and across
  // (parallel/hierarchical_communicator.h). NODE_OF_RANK: every rank's node. Collective over each
  // such group (its node and cross-node subgroups meet); every rank checks every group, so a
  // layout whose nodes hold unequal shares of a group is refused on all of them alike.
  void use_two_level_gradient_groups(const std::vector<int64_t>& node_of_rank, const CommunicatorFactory& factory);

 private:
  // The kind whose communicator serves KIND: with cp = 1 the gradient groups are the dp and
  // expert-dp groups (one communicator each, not two); without HSDP the shard groups are the
  // gradient groups.
  GroupKind resolve(GroupKind kind) const;
  bool aliased(GroupKind kind) const { return resolve(kind) != kind; }
  Communicator& sharded_gradients(GroupKind shard_kind);
  // Whether a composite's later steps over COMM's backend run on a thread of their own (Gloo,
  // whose waits block the host), or when the caller waits (NCCL).
  static bool runs_later_steps_on_thread(const Communicator& comm);
  std::unique_ptr<Communicator> make(const std::string& name, const std::string& key, const std::vector<int64_t>& ranks,
                                     const CommunicatorFactory& factory);

  RankGrid grid_;
  int64_t rank_;
  RankCoords coords_;
  std::shared_ptr<CommStats> stats_;
  std::unique_ptr<Communicator> world_;
  std::map<GroupKind, std::unique_ptr<Communicator>> groups_;
  std::map<GroupKind, std::unique_ptr<Communicator>> hsdp_;  // by shard kind, under HSDP
};

}  // namespace loom::parallel
