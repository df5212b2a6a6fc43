#include "parallel/later_steps.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "parallel/chained_op.h"

namespace loom::parallel {

struct LaterSteps::Outcome {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
  std::optional<std::chrono::steady_clock::time_point> first_done;  // set by the thread

  void first_step_done() {
    std::lock_guard<std::mutex> lock(mutex);
    first_done = std::chrono::steady_clock::now();
  }

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      error = std::move(e);
    }
    finished.notify_all();
  }
};

namespace {

// A call whose later steps the worker runs: waiting is waiting for the worker to be done with it.
class QueuedOp : public PendingOp {
 public:
  QueuedOp(std::shared_ptr<LaterSteps::Outcome> outcome, LaterSteps::Blocked blocked)
      : outcome_(std::move(outcome)), blocked_(std::move(blocked)) {}
  // The steps' own waits are bounded by their groups' timeouts, so the worker always gets here.
  void wait(std::chrono::milliseconds) override {
    const auto from = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(outcome_->mutex);
    outcome_->finished.wait(lock, [&] { return outcome_->done; });
    if (outcome_->error) std::rethrow_exception(outcome_->error);
    if (!blocked_) return;
    const auto to = std::chrono::steady_clock::now();
    const auto split = std::clamp(outcome_->first_done.value_or(from), from, to);
    blocked_(std::chrono::duration<double>(split - from).count(), std::chrono::duration<double>(to - split).count());
  }
  bool ready() const override {
    std::lock_guard<std::mutex> lock(outcome_->mutex);
    return outcome_->done;
  }

 private:
  std::shared_ptr<LaterSteps::Outcome> outcome_;
  LaterSteps::Blocked blocked_;
};

}  // namespace

LaterSteps::LaterSteps(bool threaded) {
  if (threaded) worker_ = std::thread([this] { run(); });
}

std::unique_ptr<LaterSteps> LaterSteps::on_thread() {
  return std::unique_ptr<LaterSteps>(new LaterSteps(true));
}

std::unique_ptr<LaterSteps> LaterSteps::when_waited() {
  return std::unique_ptr<LaterSteps>(new LaterSteps(false));
}

LaterSteps::~LaterSteps() {
  if (!threaded()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  queued_.notify_all();
  worker_.join();
}

std::unique_ptr<PendingOp> LaterSteps::after(CommHandle first, std::function<void()> rest, Blocked blocked) {
  if (!threaded()) return std::make_unique<ChainedOp>(std::move(first), std::move(rest));
  auto outcome = std::make_shared<Outcome>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(first), std::move(rest), outcome});
  }
  queued_.notify_one();
  return std::make_unique<QueuedOp>(std::move(outcome), std::move(blocked));
}

void LaterSteps::run() {
  at::init_num_threads();  // the rank's thread count for the steps' copies, not OpenMP's default
  Communicator::blocking_no_training_on_this_thread();
  for (;;) {
    Queued call;
    bool closing = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;
      call = std::move(queue_.front());
      queue_.pop_front();
      closing = closing_;
    }
    if (closing && !failed_) {
      failed_ = std::make_exception_ptr(
          std::runtime_error("the communicator was closed before this call's later steps were issued"));
    }
    if (!failed_) {
      try {
        call.first.wait();
        call.outcome->first_step_done();
        call.rest();
      } catch (...) {
        failed_ = std::current_exception();
      }
    }
    call.outcome->finish(failed_);
  }
}

}  // namespace loom::parallel
