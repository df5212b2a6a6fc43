// Pending operations of a communicator built from other communicators (two-level collectives,
// HSDP's shard and replica groups): an inner group's call waited for as the outer one's, and a
// first call issued at once whose remaining steps run when the caller waits.
#pragma once

#include <functional>
#include <memory>

#include "parallel/communicator.h"
#include "parallel/later_steps.h"

namespace loom::parallel {

// An inner communicator's call, waited for as the outer one's.
class InnerOp : public PendingOp {
 public:
  explicit InnerOp(CommHandle handle) : handle_(std::move(handle)) {}
  void wait(std::chrono::milliseconds) override { handle_.wait(); }
  bool ready() const override { return handle_.ready(); }

 private:
  CommHandle handle_;
};

// FIRST is issued at once (it overlaps whatever the caller does next, as a plain collective would);
// REST runs when the caller waits, in the order every rank waits in, so every rank issues the inner
// groups' calls in the same order (LaterSteps::when_waited).
class ChainedOp : public PendingOp {
 public:
  ChainedOp(CommHandle first, std::function<void()> rest) : first_(std::move(first)), rest_(std::move(rest)) {}
  void wait(std::chrono::milliseconds) override {
    first_.wait();
    rest_();
  }
  bool ready() const override { return false; }  // REST has not started

 private:
  CommHandle first_;
  std::function<void()> rest_;
};

// An all-reduce over the ranks of INSIDE times ACROSS in two steps: TENSOR reduce-scattered inside,
// this rank's share all-reduced across, then all-gathered inside again, the last two by LATER (the
// gather on INSIDE_LATER: INSIDE's ranks, a communicator of LATER's own where it runs on a thread).
// A tensor that does not split evenly goes through a padded copy (the padding is never read back).
// The communicators outlive the operation. BLOCKED: as LaterSteps::after's.
inline std::unique_ptr<PendingOp> all_reduce_in_two_steps(Communicator& inside, Communicator& inside_later,
                                                          Communicator& across, LaterSteps& later,
                                                          torch::Tensor& tensor, ReduceOp op,
                                                          LaterSteps::Blocked blocked = {}) {
  const int64_t local = inside.size(), n = tensor.numel(), share = (n + local - 1) / local;
  auto flat = tensor.view({-1});
  auto whole = flat;
  if (share * local != n) {
    whole = torch::zeros({share * local}, tensor.options());
    whole.narrow(0, 0, n).copy_(flat);
  }
  auto mine = torch::empty({share}, tensor.options());
  auto first = inside.reduce_scatter(mine, whole, op);
  return later.after(
      std::move(first),
      [&inside_later, &across, flat, whole, mine, n, op]() mutable {
        across.all_reduce(mine, op).wait();
        inside_later.all_gather(whole, mine).wait();
        if (whole.data_ptr() != flat.data_ptr()) flat.copy_(whole.narrow(0, 0, n));
      },
      std::move(blocked));
}

// HANDLE as a pending operation, or none when it completed at launch (a group of one).
inline std::unique_ptr<PendingOp> pending_inner(CommHandle handle) {
  if (handle.done()) return nullptr;
  return std::make_unique<InnerOp>(std::move(handle));
}

}  // namespace loom::parallel
