// Where a composite communicator's later steps run: HSDP's all-reduce across the replicas, a
// two-level collective's second level, the steps that may start only once a call's first step
// (issued at once, by the caller) is done.
//
// Over Gloo a wait blocks the host, so a later step run when the caller waits starts only then:
// after backward for ZeRO-1's buckets, and on the autograd thread, stalling it, for ZeRO-2/3's.
// LaterSteps::on_thread() runs them on a thread of their own instead, which waits for each call's
// first step in call order and issues the rest at once, so the slow link works while backward
// still computes. Its steps must go to communicators no other thread uses: two threads issuing
// calls on one group could order them differently on different ranks, and the ranks would pair
// the wrong collectives.
//
// LaterSteps::when_waited() runs them on the caller's thread when it waits, in the order every
// rank waits in (NCCL's communicators: a thread of its own would need the caller's CUDA device).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "parallel/communicator.h"

namespace loom::parallel {

class LaterSteps {
 public:
  // How long a caller's wait for a queued call stood still: the part before the call's first step
  // was done, and the part after (its later steps').
  using Blocked = std::function<void(double on_first_s, double on_rest_s)>;

  static std::unique_ptr<LaterSteps> on_thread();
  static std::unique_ptr<LaterSteps> when_waited();
  // Lets the step in progress finish (each is bounded by its group's timeout) and fails the
  // queued ones: their calls were never waited for.
  ~LaterSteps();
  LaterSteps(const LaterSteps&) = delete;
  LaterSteps& operator=(const LaterSteps&) = delete;

  bool threaded() const { return worker_.joinable(); }
  // The call whose first step is FIRST (already issued) and whose remaining steps REST issues and
  // waits for. Once one call's steps fail, every later call fails with the same error unissued:
  // the group's calls would no longer pair up. On a thread, BLOCKED (if given) is told how long the
  // caller's wait for the call stood still (the thread's own waits block no training).
  std::unique_ptr<PendingOp> after(CommHandle first, std::function<void()> rest, Blocked blocked = {});

  struct Outcome;  // a queued call's result, shared with the pending op that waits for it

 private:
  explicit LaterSteps(bool threaded);
  void run();

  struct Queued {
    CommHandle first;
    std::function<void()> rest;
    std::shared_ptr<Outcome> outcome;
  };
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Queued> queue_;
  bool closing_ = false;
  std::exception_ptr failed_;  // the first failure, which every later call reports (the worker's own)
  std::thread worker_;
};

}  // namespace loom::parallel
