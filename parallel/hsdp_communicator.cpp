#include "parallel/hsdp_communicator.h"

#include "parallel/chained_op.h"

namespace loom::parallel {

HsdpCommunicator::HsdpCommunicator(Communicator& shard, Communicator& replicate,
                                   std::unique_ptr<Communicator> shard_later, std::shared_ptr<CommStats> stats)
    : Communicator(shard.name(), shard.ranks(), shard.rank(), std::move(stats), shard.timeout()),
      shard_(shard),
      replicate_(replicate),
      shard_later_(std::move(shard_later)),
      later_(shard_later_ ? LaterSteps::on_thread() : LaterSteps::when_waited()) {
  stop_counting();
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_all_reduce(torch::Tensor& tensor, ReduceOp op) {
  // A shard group of one: only the replicas' all-reduce, issued at once; on a thread, by the thread
  // (which alone then uses REPLICATE).
  if (size() == 1 && !later_->threaded()) return pending_inner(replicate_.all_reduce(tensor, op));
  if (size() == 1) {
    return later_->after(
        CommHandle(), [this, tensor, op] { replicate_.all_reduce(tensor, op).wait(); }, blocked_on_replicas());
  }
  return all_reduce_in_two_steps(shard_, shard_later_ ? *shard_later_ : shard_, replicate_, *later_, tensor, op,
                                 blocked_on_replicas());
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_reduce_scatter(torch::Tensor& output, torch::Tensor& input,
                                                               ReduceOp op) {
  auto first = shard_.reduce_scatter(output, input, op);
  return later_->after(
      std::move(first), [this, output, op] { replicate_.all_reduce(output, op).wait(); }, blocked_on_replicas());
}

// The training thread's wait for a reduction whose steps run on the later-steps thread: until its
// reduce-scatter in the shard group was done, the shard group's; after, the replicas' all-reduce's
// (and for an all-reduce the shard group's all-gather after it, the short step inside the node).
LaterSteps::Blocked HsdpCommunicator::blocked_on_replicas() const {
  return [stats = stats(), shard = shard_.name(), replicas = replicate_.name()](double on_first, double on_rest) {
    if (on_first > 0) stats->record_blocked(shard, "reduce_scatter", on_first);
    stats->record_blocked(replicas, "all_reduce", on_rest);
  };
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_all_gather(torch::Tensor& output, torch::Tensor& input) {
  return pending_inner(shard_.all_gather(output, input));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits) {
  return pending_inner(shard_.all_to_all(output, input, output_splits, input_splits));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_broadcast(torch::Tensor& tensor, int root) {
  return pending_inner(shard_.broadcast(tensor, root));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_send_recv(std::vector<P2POp>& ops) {
  return pending_inner(shard_.send_recv(ops));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_barrier() {
  return pending_inner(shard_.barrier());
}

}  // namespace loom::parallel
