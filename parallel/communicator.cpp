#include "parallel/communicator.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <thread>

#include "core/errors.h"

namespace loom::parallel {
namespace {

int64_t nbytes(const torch::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

// c10 errors carry a long C++ backtrace that would bury the one line that matters.
std::string reason(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

// A planted fault: the inner operation, then its results scaled.
class ScaledOp : public PendingOp {
 public:
  ScaledOp(std::unique_ptr<PendingOp> inner, std::vector<torch::Tensor> results, double factor)
      : inner_(std::move(inner)), results_(std::move(results)), factor_(factor) {}
  void wait(std::chrono::milliseconds timeout) override {
    if (inner_) inner_->wait(timeout);
    for (auto& t : results_) t.mul_(factor_);
  }
  bool ready() const override { return !inner_ || inner_->ready(); }

 private:
  std::unique_ptr<PendingOp> inner_;
  std::vector<torch::Tensor> results_;
  double factor_;
};

// Set on a composite's later-steps thread (Communicator::blocking_no_training_on_this_thread).
thread_local bool t_blocks_no_training = false;

}  // namespace

void Communicator::blocking_no_training_on_this_thread() {
  t_blocks_no_training = true;
}

void CommHandle::wait() {
  if (!op_) return;
  const auto blocked_from = std::chrono::steady_clock::now();
  try {
    InsideCollective inside(comm_->stats_ ? comm_->stats_->presence().get() : nullptr);
    op_->wait(bound_.timeout);
  } catch (const std::exception& e) {
    op_.reset();
    throw CommError(comm_->describe_failure(op_name_, reason(e), bound_));
  }
  op_.reset();
  if (!comm_->counted_) return;
  const auto now = std::chrono::steady_clock::now();
  comm_->stats_->record_time(comm_->name(), op_name_, std::chrono::duration<double>(now - start_).count(), bytes_);
  if (t_blocks_no_training) return;
  comm_->stats_->record_blocked(comm_->name(), op_name_, std::chrono::duration<double>(now - blocked_from).count());
}

Communicator::Communicator(std::string name, std::vector<int64_t> ranks, int rank, std::shared_ptr<CommStats> stats,
                           std::chrono::milliseconds timeout)
    : name_(std::move(name)), ranks_(std::move(ranks)), rank_(rank), stats_(std::move(stats)), timeout_(timeout) {}

std::string Communicator::describe_failure(const std::string& op, const std::string& why,
                                           const WaitBound& bound) const {
  std::ostringstream s;
  s << op << " on group " << name_ << " (global ranks [";
  for (size_t i = 0; i < ranks_.size(); ++i) s << (i ? ", " : "") << ranks_[i];
  s << "]) failed on global rank " << ranks_[rank_] << ": " << why;
  // A two-level group's failure wraps its level's, which already says what a failure means.
  static const std::string kMeaning = " (a peer has died, is stuck or diverged; ";
  if (why.find(kMeaning) == std::string::npos) {
    s << kMeaning << bound.what << " time out after " << std::chrono::duration<double>(bound.timeout).count() << " s, "
      << bound.key << ")";
  }
  return s.str();
}

std::vector<std::pair<int64_t, int64_t>> Communicator::to_next(int64_t bytes) const {
  if (size() < 2) return {};
  return {{ranks_[static_cast<size_t>((rank_ + 1) % size())], bytes}};
}

std::vector<std::pair<int64_t, int64_t>> Communicator::all_reduce_sends(const torch::Tensor& tensor) const {
  const int64_t p = size();  // ring: a reduce-scatter then an all-gather, each (P-1)/P of the tensor
  return to_next(2 * (p - 1) * nbytes(tensor) / p);
}

std::vector<std::pair<int64_t, int64_t>> Communicator::reduce_scatter_sends(const torch::Tensor& output) const {
  return to_next((size() - 1) * nbytes(output));
}

std::vector<std::pair<int64_t, int64_t>> Communicator::all_gather_sends(const torch::Tensor& input) const {
  return to_next((size() - 1) * nbytes(input));
}

std::unique_ptr<PendingOp> Communicator::apply_fault(const std::string& op, std::unique_ptr<PendingOp> pending,
                                                     std::vector<torch::Tensor>& results) {
  auto& f = *fault_;
  if (results.empty() || (!f.ops.empty() && std::find(f.ops.begin(), f.ops.end(), op) == f.ops.end())) return pending;
  if (f.fired.exchange(true)) return pending;  // (HSDP's replica steps run on a thread of their own)
  if (!pending) {                              // done already (a synchronous backend, a group of one)
    for (auto& t : results) t.mul_(f.factor);
    return nullptr;
  }
  return std::make_unique<ScaledOp>(std::move(pending), results, f.factor);
}

template <typename Issue>
CommHandle Communicator::launch(const std::string& op, int64_t bytes, std::vector<std::pair<int64_t, int64_t>> sends,
                                Issue&& issue, std::vector<torch::Tensor> results) {
  CommHandle handle;
  handle.comm_ = this;
  handle.op_name_ = op;
  handle.bound_ = issue_bound_;
  handle.bytes_ = bytes;
  handle.start_ = std::chrono::steady_clock::now();
  const bool counted = counted_ && size() > 1;
  if (counted) stats_->record_call(name_, op, bytes, sends);
  InsideCollective inside(stats_ ? stats_->presence().get() : nullptr);  // an issue can block too
  if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
  try {
    handle.op_ = issue();
    if (fault_) handle.op_ = apply_fault(op, std::move(handle.op_), results);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(describe_failure(op, reason(e), issue_bound_));
  }
  if (!handle.op_ && counted) stats_->record_time(name_, op, 0.0, bytes);
  // An issue that blocks (a synchronous backend's call) is time spent on the peers too.
  if (counted && !t_blocks_no_training) {
    stats_->record_blocked(name_, op,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - handle.start_).count());
  }
  return handle;
}

CommHandle Communicator::all_reduce(torch::Tensor tensor, ReduceOp op) {
  TORCH_CHECK(tensor.is_contiguous(), "all_reduce needs a contiguous tensor");
  return launch("all_reduce", nbytes(tensor), all_reduce_sends(tensor), [&] { return do_all_reduce(tensor, op); },
                {tensor});
}

CommHandle Communicator::all_gather(torch::Tensor output, torch::Tensor input) {
  TORCH_CHECK(output.is_contiguous() && input.is_contiguous(), "all_gather needs contiguous tensors");
  TORCH_CHECK(output.numel() == input.numel() * size(), "all_gather output must hold size() inputs");
  return launch("all_gather", nbytes(output), all_gather_sends(input), [&] { return do_all_gather(output, input); },
                {output});
}

CommHandle Communicator::reduce_scatter(torch::Tensor output, torch::Tensor input, ReduceOp op) {
  TORCH_CHECK(output.is_contiguous() && input.is_contiguous(), "reduce_scatter needs contiguous tensors");
  TORCH_CHECK(input.numel() == output.numel() * size(), "reduce_scatter input must hold size() outputs");
  return launch("reduce_scatter", nbytes(input), reduce_scatter_sends(output),
                [&] { return do_reduce_scatter(output, input, op); }, {output});
}

CommHandle Communicator::all_to_all(torch::Tensor output, torch::Tensor input, std::vector<int64_t> output_splits,
                                    std::vector<int64_t> input_splits) {
  TORCH_CHECK(output.is_contiguous() && input.is_contiguous(), "all_to_all needs contiguous tensors");
  TORCH_CHECK(static_cast<int>(output_splits.size()) == size() && static_cast<int>(input_splits.size()) == size(),
              "all_to_all needs one split per rank");
  TORCH_CHECK(std::accumulate(input_splits.begin(), input_splits.end(), int64_t{0}) == input.size(0) &&
                  std::accumulate(output_splits.begin(), output_splits.end(), int64_t{0}) == output.size(0),
              "all_to_all splits must add up to the rows of the tensors");
  const int64_t row_bytes = input.size(0) ? nbytes(input) / input.size(0) : 0;
  const int64_t sent = (input.size(0) - input_splits[rank_]) * row_bytes;
  std::vector<std::pair<int64_t, int64_t>> sends;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank_ && input_splits[peer] > 0) sends.emplace_back(ranks_[peer], input_splits[peer] * row_bytes);
  }
  return launch("all_to_all", sent, std::move(sends),
                [&] { return do_all_to_all(output, input, output_splits, input_splits); }, {output});
}

CommHandle Communicator::broadcast(torch::Tensor tensor, int root) {
  TORCH_CHECK(tensor.is_contiguous(), "broadcast needs a contiguous tensor");
  std::vector<std::pair<int64_t, int64_t>> sends;
  for (int peer = 0; rank_ == root && peer < size(); ++peer) {
    if (peer != root) sends.emplace_back(ranks_[peer], nbytes(tensor));
  }
  return launch("broadcast", nbytes(tensor), std::move(sends), [&] { return do_broadcast(tensor, root); }, {tensor});
}

CommHandle Communicator::send_recv(std::vector<P2POp> ops) {
  int64_t bytes = 0;
  std::vector<std::pair<int64_t, int64_t>> sends;
  std::vector<torch::Tensor> received;
  for (const auto& op : ops) {
    if (op.kind == P2POp::recv) received.push_back(op.tensor);
    TORCH_CHECK(op.tensor.is_contiguous(), "send_recv needs contiguous tensors");
    TORCH_CHECK(op.peer >= 0 && op.peer < size() && op.peer != rank_, "send_recv peer out of range");
    bytes += nbytes(op.tensor);
    if (op.kind == P2POp::send) sends.emplace_back(ranks_[op.peer], nbytes(op.tensor));
  }
  return launch(
      "send_recv", bytes, std::move(sends), [&] { return do_send_recv(ops); }, std::move(received));
}

CommHandle Communicator::barrier() {
  return launch("barrier", 0, {}, [&] { return do_barrier(); });
}

namespace {

// Issues CALL with CURRENT set to BOUND, restored after, thrown or not.
template <typename Call>
CommHandle issued_within(WaitBound& current, const WaitBound& bound, Call&& call) {
  struct Restore {
    WaitBound& current;
    const WaitBound saved;
    ~Restore() { current = saved; }
  } restore{current, current};
  current = bound;
  return call();
}

}  // namespace

CommHandle Communicator::all_reduce(torch::Tensor tensor, ReduceOp op, const WaitBound& bound) {
  return issued_within(issue_bound_, bound, [&] { return all_reduce(tensor, op); });
}

CommHandle Communicator::broadcast(torch::Tensor tensor, int root, const WaitBound& bound) {
  return issued_within(issue_bound_, bound, [&] { return broadcast(tensor, root); });
}

CommHandle Communicator::barrier(const WaitBound& bound) {
  return issued_within(issue_bound_, bound, [&] { return barrier(); });
}

SelfCommunicator::SelfCommunicator(std::string name, int64_t global_rank, std::shared_ptr<CommStats> stats)
    : Communicator(std::move(name), {global_rank}, 0, std::move(stats), std::chrono::milliseconds(0)) {}

std::unique_ptr<PendingOp> SelfCommunicator::do_all_gather(torch::Tensor& output, torch::Tensor& input) {
  output.view_as(input).copy_(input);
  return nullptr;
}

std::unique_ptr<PendingOp> SelfCommunicator::do_reduce_scatter(torch::Tensor& output, torch::Tensor& input, ReduceOp) {
  output.copy_(input.view_as(output));
  return nullptr;
}

std::unique_ptr<PendingOp> SelfCommunicator::do_all_to_all(torch::Tensor& output, torch::Tensor& input,
                                                           std::vector<int64_t>&, std::vector<int64_t>&) {
  output.copy_(input);
  return nullptr;
}

std::unique_ptr<PendingOp> SelfCommunicator::do_send_recv(std::vector<P2POp>& ops) {
  TORCH_CHECK(ops.empty(), "a group of one rank has no peer to send to");
  return nullptr;
}

}  // namespace loom::parallel
