#include "parallel/hsdp_communicator.h"

#include <functional>

namespace loom::parallel {
namespace {

// An inner group's call, waited for as this one's.
class InnerOp : public PendingOp {
 public:
  explicit InnerOp(CommHandle handle) : handle_(std::move(handle)) {}
  void wait(std::chrono::milliseconds) override { handle_.wait(); }

 private:
  CommHandle handle_;
};

std::unique_ptr<PendingOp> inner(CommHandle handle) {
  if (handle.done()) return nullptr;
  return std::make_unique<InnerOp>(std::move(handle));
}

// The shard group's step is issued at once (it overlaps what the caller does next, as a plain
// collective would); the rest runs when the caller waits, in the order every rank waits in.
class TwoStepOp : public PendingOp {
 public:
  TwoStepOp(CommHandle first, std::function<void()> rest) : first_(std::move(first)), rest_(std::move(rest)) {}
  void wait(std::chrono::milliseconds) override {
    first_.wait();
    rest_();
  }

 private:
  CommHandle first_;
  std::function<void()> rest_;
};

}  // namespace

HsdpCommunicator::HsdpCommunicator(Communicator& shard, Communicator& replicate, std::shared_ptr<CommStats> stats)
    : Communicator(shard.name(), shard.ranks(), shard.rank(), std::move(stats), shard.timeout()),
      shard_(shard),
      replicate_(replicate) {
  stop_counting();
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_all_reduce(torch::Tensor& tensor, ReduceOp op) {
  const int64_t s = size(), n = tensor.numel();
  if (s == 1) return inner(replicate_.all_reduce(tensor, op));
  const int64_t share = (n + s - 1) / s;
  auto flat = tensor.view({-1});
  // A tensor that does not split evenly goes through a padded copy (the padding is never read back).
  auto whole = flat;
  if (share * s != n) {
    whole = torch::zeros({share * s}, tensor.options());
    whole.narrow(0, 0, n).copy_(flat);
  }
  auto mine = torch::empty({share}, tensor.options());
  auto first = shard_.reduce_scatter(mine, whole, op);
  return std::make_unique<TwoStepOp>(std::move(first), [this, flat, whole, mine, n, op]() mutable {
    replicate_.all_reduce(mine, op).wait();
    shard_.all_gather(whole, mine).wait();
    if (whole.data_ptr() != flat.data_ptr()) flat.copy_(whole.narrow(0, 0, n));
  });
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_reduce_scatter(torch::Tensor& output, torch::Tensor& input,
                                                               ReduceOp op) {
  auto first = shard_.reduce_scatter(output, input, op);
  return std::make_unique<TwoStepOp>(std::move(first),
                                     [this, output, op]() mutable { replicate_.all_reduce(output, op).wait(); });
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_all_gather(torch::Tensor& output, torch::Tensor& input) {
  return inner(shard_.all_gather(output, input));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits) {
  return inner(shard_.all_to_all(output, input, output_splits, input_splits));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_broadcast(torch::Tensor& tensor, int root) {
  return inner(shard_.broadcast(tensor, root));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_send_recv(std::vector<P2POp>& ops) {
  return inner(shard_.send_recv(ops));
}

std::unique_ptr<PendingOp> HsdpCommunicator::do_barrier() {
  return inner(shard_.barrier());
}

}  // namespace loom::parallel
