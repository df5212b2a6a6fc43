// The only door to the wire. Every collective goes through Communicator's
// public methods, which count it, time it and turn a backend failure (a dead
// or stuck peer, a timeout) into a CommError naming the group, the op and the
// ranks. Backends (Gloo, NCCL) implement the protected do_* hooks.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm_stats.h"

namespace loom::parallel {

enum class ReduceOp { sum, max, min };

struct P2POp {
  enum Kind { send, recv };
  Kind kind;
  torch::Tensor tensor;
  int peer;     // rank within the group
  int tag = 0;  // messages between a pair match by tag (Gloo); NCCL matches in issue order
};

// A backend's operation in flight.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Whether wait() would return without waiting on a peer (Work::isCompleted in c10d). The result
  // may still be unwritten: wait() can finish it locally (Gloo's one-shot sums the rows received,
  // bf16 is cast back), so it is read only after wait().
  virtual bool ready() const = 0;
};

class Communicator;

// How long a wait on peers may take, and what its error names when it runs out. KEY and WHAT are
// string literals: a handle carries its call's bound from issue to wait.
struct WaitBound {
  std::chrono::milliseconds timeout;
  const char* key;   // the config key that sets it: "parallel.timeout_s"
  const char* what;  // what times out, in the error: "collectives"
};

// Returned by every call; wait() blocks until the result is in place.
class CommHandle {
 public:
  CommHandle() = default;
  // Bounded by the call's WaitBound: the communicator's, or the one it was issued with.
  void wait();
  // No operation left to wait for (waited already, or done at launch).
  bool done() const { return op_ == nullptr; }
  // wait() would not block on a peer: done, or its operation's messages all in (read the result
  // only after wait(), which may still write it).
  bool ready() const { return op_ == nullptr || op_->ready(); }

 private:
  friend class Communicator;
  std::unique_ptr<PendingOp> op_;
  const Communicator* comm_ = nullptr;
  std::string op_name_;
  WaitBound bound_{};
  int64_t bytes_ = 0;
  std::chrono::steady_clock::time_point start_;
};

class Communicator {
 public:
  // NAME is the group kind ("dp", "tp", ...); RANKS the global ranks in group order.
  Communicator(std::string name, std::vector<int64_t> ranks, int rank, std::shared_ptr<CommStats> stats,
               std::chrono::milliseconds timeout);
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int64_t>& ranks() const { return ranks_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // timeout() as a bound: parallel.timeout_s on collectives.
  WaitBound bound() const { return {timeout_, "parallel.timeout_s", "collectives"}; }
  virtual std::string backend() const = 0;

  // In place on TENSOR.
  CommHandle all_reduce(torch::Tensor tensor, ReduceOp op = ReduceOp::sum);
  // OUTPUT is every rank's INPUT stacked along dim 0 in group order.
  CommHandle all_gather(torch::Tensor output, torch::Tensor input);
  // INPUT is size() equal chunks along dim 0; rank r gets the reduction of chunk r.
  CommHandle reduce_scatter(torch::Tensor output, torch::Tensor input, ReduceOp op = ReduceOp::sum);
  // Rows of INPUT go to ranks by INPUT_SPLITS; OUTPUT receives rows by OUTPUT_SPLITS.
  CommHandle all_to_all(torch::Tensor output, torch::Tensor input, std::vector<int64_t> output_splits,
                        std::vector<int64_t> input_splits);
  CommHandle broadcast(torch::Tensor tensor, int root);
  // Sends and receives issued together so that neither side can block the other.
  CommHandle send_recv(std::vector<P2POp> ops);
  CommHandle barrier();
  // The same three bounded by BOUND instead of bound(), from issue (a backend may fix an
  // operation's bound then: Gloo's collectives) to wait: a wait on a peer's disk rather than on
  // its collectives (launch/checkpoint.cpp).
  CommHandle all_reduce(torch::Tensor tensor, ReduceOp op, const WaitBound& bound);
  CommHandle broadcast(torch::Tensor tensor, int root, const WaitBound& bound);
  CommHandle barrier(const WaitBound& bound);

  // "all_reduce on group dp (global ranks [0, 1]) from rank 1: WHY (... BOUND)".
  std::string describe_failure(const std::string& op, const std::string& why, const WaitBound& bound) const;

  // A planted numerical fault, for tests of `loom verify` (--inject-fault RANK:STEP:scale:GROUP:EPS):
  // the next call of one of OPS ("all_reduce", "send_recv", ...; empty: any) on this rank that
  // has a result here (a send alone has none) gets it multiplied by FACTOR, once. The fault is
  // shared: several communicators of one parallel dimension can hold it, the first call fires it.
  struct ResultFault {
    double factor = 1.0;
    std::vector<std::string> ops;
    std::atomic<bool> fired{false};
  };
  void plant(std::shared_ptr<ResultFault> fault) { fault_ = std::move(fault); }
  // A planted delay, for tests of `loom diagnose`: every call sleeps DELAY before it is issued
  // (time spent blocked in this group's collective, as a slow link would cost it).
  void plant_delay(std::chrono::milliseconds delay) { delay_ = delay; }
  // This communicator's calls are steps of an outer one's (parallel/hierarchical_communicator.h),
  // which counts and times them: counted here they would be counted twice.
  void stop_counting() { counted_ = false; }
  // Calls issued and waited for on the calling thread from now on block no training: a composite's
  // later steps on a thread of their own (parallel/later_steps.h). Their calls and time are still
  // counted, not as time this rank stood still: the training thread's wait for them is.
  static void blocking_no_training_on_this_thread();

 protected:
  const std::shared_ptr<CommStats>& stats() const { return stats_; }
  // The bound of the call being issued: timeout() but inside the bounded overloads above.
  std::chrono::milliseconds issue_timeout() const { return issue_bound_.timeout; }
  // (global rank, bytes) a ring collective sends to each peer, as CommStats counts it: by default
  // each ring step goes to the next rank of the group (a ring all-reduce sends 2(P-1)/P of the
  // tensor, a reduce-scatter or all-gather (P-1)/P of the whole).
  virtual std::vector<std::pair<int64_t, int64_t>> all_reduce_sends(const torch::Tensor& tensor) const;
  virtual std::vector<std::pair<int64_t, int64_t>> reduce_scatter_sends(const torch::Tensor& output) const;
  virtual std::vector<std::pair<int64_t, int64_t>> all_gather_sends(const torch::Tensor& input) const;

  virtual std::unique_ptr<PendingOp> do_all_reduce(torch::Tensor& tensor, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> do_all_gather(torch::Tensor& output, torch::Tensor& input) = 0;
  virtual std::unique_ptr<PendingOp> do_reduce_scatter(torch::Tensor& output, torch::Tensor& input, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                                   std::vector<int64_t>& output_splits,
                                                   std::vector<int64_t>& input_splits) = 0;
  virtual std::unique_ptr<PendingOp> do_broadcast(torch::Tensor& tensor, int root) = 0;
  virtual std::unique_ptr<PendingOp> do_send_recv(std::vector<P2POp>& ops) = 0;
  virtual std::unique_ptr<PendingOp> do_barrier() = 0;

 private:
  // SENDS: (global rank, bytes) this call transmits to each peer, as CommStats models it.
  // RESULTS: the tensors this call writes on this rank (what a planted fault scales).
  template <typename Issue>
  CommHandle launch(const std::string& op, int64_t bytes, std::vector<std::pair<int64_t, int64_t>> sends, Issue&& issue,
                    std::vector<torch::Tensor> results = {});
  // The planted fault's scaling, if this call fires it (a wrapper on PENDING, or done at once).
  std::unique_ptr<PendingOp> apply_fault(const std::string& op, std::unique_ptr<PendingOp> pending,
                                         std::vector<torch::Tensor>& results);
  // A ring step: BYTES to the next rank of the group.
  std::vector<std::pair<int64_t, int64_t>> to_next(int64_t bytes) const;

  friend class CommHandle;
  std::string name_;
  std::vector<int64_t> ranks_;
  int rank_;
  std::shared_ptr<CommStats> stats_;
  std::chrono::milliseconds timeout_;
  WaitBound issue_bound_ = bound();
  std::shared_ptr<ResultFault> fault_;
  std::chrono::milliseconds delay_{0};
  bool counted_ = true;
};

// A group of one rank: every op is local and nothing touches a backend.
class SelfCommunicator : public Communicator {
 public:
  SelfCommunicator(std::string name, int64_t global_rank, std::shared_ptr<CommStats> stats);
  std::string backend() const override { return "self"; }

 protected:
  std::unique_ptr<PendingOp> do_all_reduce(torch::Tensor&, ReduceOp) override { return nullptr; }
  std::unique_ptr<PendingOp> do_all_gather(torch::Tensor& output, torch::Tensor& input) override;
  std::unique_ptr<PendingOp> do_reduce_scatter(torch::Tensor& output, torch::Tensor& input, ReduceOp) override;
  std::unique_ptr<PendingOp> do_all_to_all(torch::Tensor& output, torch::Tensor& input, std::vector<int64_t>&,
                                           std::vector<int64_t>&) override;
  std::unique_ptr<PendingOp> do_broadcast(torch::Tensor&, int) override { return nullptr; }
  std::unique_ptr<PendingOp> do_send_recv(std::vector<P2POp>& ops) override;
  std::unique_ptr<PendingOp> do_barrier() override { return nullptr; }
};

}  // namespace loom::parallel
