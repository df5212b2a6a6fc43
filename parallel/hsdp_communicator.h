// ZeRO's gradient group under HSDP (parallel.dp_shard): the shard group, whose gradient
// reductions also sum over the replicas (the same shard of every other shard group), as the
// background pages teach HSDP: shard inside a node, replicate across nodes.
//
//   reduce_scatter = reduce-scatter inside the shard group, then all-reduce of this rank's share
//                    across the replicas (ZeRO's gradients: each shard summed over all of dp);
//   all_reduce     = reduce-scatter inside the shard group, all-reduce of the share across the
//                    replicas, all-gather inside the shard group (whole buckets: ZeRO-1 under
//                    Muon, whose owners read whole matrices);
//   all_gather, broadcast, all_to_all, send_recv, barrier: the shard group's own.
// Its size and rank are the shard group's: ZeRO's shards are that group's. It counts nothing
// itself: each step is counted by the shard or replica group it runs on (dp-shard, dp-replicate),
// so the traffic report shows what crossed which link. The steps after a reduction's first run as
// parallel/later_steps.h says: over Gloo on a thread of their own, as soon as the first is done.
#pragma once

#include <functional>
#include <memory>

#include "parallel/communicator.h"
#include "parallel/later_steps.h"

namespace loom::parallel {

class HsdpCommunicator : public Communicator {
 public:
  // SHARD and REPLICATE outlive this (ProcessGroups owns all three). SHARD_LATER, a second
  // communicator over the shard group's ranks: given, the later steps run on a thread of their own
  // (Gloo), which alone then uses it and REPLICATE; null, they run when the caller waits (NCCL).
  HsdpCommunicator(Communicator& shard, Communicator& replicate, std::unique_ptr<Communicator> shard_later,
                   std::shared_ptr<CommStats> stats);
  std::string backend() const override { return shard_.backend() + " (hsdp)"; }
  // The second communicator over the shard group's ranks (null when there is none), for faults
  // planted on every communicator of the dp groups (launch/trainer_faults.cpp).
  Communicator* shard_later() const { return shard_later_.get(); }

 protected:
  std::unique_ptr<PendingOp> do_all_reduce(torch::Tensor& tensor, ReduceOp op) override;
  std::unique_ptr<PendingOp> do_all_gather(torch::Tensor& output, torch::Tensor& input) override;
  std::unique_ptr<PendingOp> do_reduce_scatter(torch::Tensor& output, torch::Tensor& input, ReduceOp op) override;
  std::unique_ptr<PendingOp> do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                           std::vector<int64_t>& output_splits,
                                           std::vector<int64_t>& input_splits) override;
  std::unique_ptr<PendingOp> do_broadcast(torch::Tensor& tensor, int root) override;
  std::unique_ptr<PendingOp> do_send_recv(std::vector<P2POp>& ops) override;
  std::unique_ptr<PendingOp> do_barrier() override;

 private:
  LaterSteps::Blocked blocked_on_replicas() const;

  Communicator& shard_;
  Communicator& replicate_;
  std::unique_ptr<Communicator> shard_later_;  // (null: shard_ itself)
  std::unique_ptr<LaterSteps> later_;          // last: its thread stops before the groups it uses go
};

}  // namespace loom::parallel
