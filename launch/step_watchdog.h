// train.step_timeout_s: a step that makes no progress for too long ends the job (exit 1).
//
// A rank that stops answering is found by its peers: the collective they wait in times out
// (parallel.timeout_s) and the heartbeats name it. Nothing finds a stall that holds every rank
// at once, outside any collective: a file system that stops answering under the data or the run
// directory, a GPU that hangs, a model's own endless loop, or the one rank of a one-process job.
// Such a job sat for ever, holding its nodes, without a word. The watchdog, a thread of its own,
// watches each interval of the training loop (a step up to its checkpoint, one evaluation batch),
// and ends the job naming the step and what the rank was doing when one lasts past the limit.
// Saves and resumes are not watched: checkpoint.timeout_s bounds those.
//
// The clock counts only the time the process ran: a job stopped and continued (SLURM's `scontrol
// suspend`, SIGSTOP) has not stalled, so a gap much longer than the thread's period counts as one
// period.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "parallel/collective_presence.h"

namespace loom::launch {

struct StepWatchdogOptions {
  // train.step_timeout_s, which holds from the first step; 0: automatic, the largest of 2 x
  // parallel.timeout_s and parallel.timeout_s + 20 s (so that a collective's own timeout, which names
  // the rank it waits on, comes first) and 10 x the slowest interval so far; before any interval has
  // ended (the first step pays for warm-up), the larger of 3 x parallel.timeout_s and + 20 s.
  double step_timeout_s = 0.0;
  double collective_timeout_s = 300.0;  // parallel.timeout_s
};

class StepWatchdog {
 public:
  // PRESENCE (may be null): whether this rank is inside a collective, said when it fires. EXPIRE:
  // what firing does with the message (default: the job ends, exit 1, as a stuck peer's would).
  StepWatchdog(StepWatchdogOptions options, std::shared_ptr<const parallel::CollectivePresence> presence,
               std::function<void(const std::string&)> expire = {});
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  // A new interval of STEP begins, doing WHAT (a literal: "reading data"); the clock restarts.
  void start(int64_t step, const char* what);
  // What the rank is doing now, within the same interval (a literal).
  void doing(const char* what) { doing_.store(what); }
  // Nothing is watched until the next start (the end of the run).
  void pause();

  // Not watched for its lifetime (a save: checkpoint.timeout_s bounds it); then a new interval of
  // STEP begins, doing AFTER (not when an exception leaves the scope: the run is ending).
  class Unwatched {
   public:
    Unwatched(StepWatchdog& watchdog, int64_t step, const char* after)
        : watchdog_(watchdog), step_(step), after_(after), uncaught_(std::uncaught_exceptions()) {
      watchdog_.pause();
    }
    ~Unwatched() {
      if (std::uncaught_exceptions() == uncaught_) watchdog_.start(step_, after_);
    }
    Unwatched(const Unwatched&) = delete;
    Unwatched& operator=(const Unwatched&) = delete;

   private:
    StepWatchdog& watchdog_;
    int64_t step_;
    const char* after_;
    int uncaught_;
  };

  // The limit now, in seconds.
  double limit_s() const;

 private:
  void watch();
  void end_interval_locked(std::chrono::steady_clock::time_point now);
  std::string message_locked(double waited_s, double limit, bool in_collective) const;

  StepWatchdogOptions options_;
  std::shared_ptr<const parallel::CollectivePresence> presence_;
  std::function<void(const std::string&)> expire_;
  std::chrono::milliseconds period_;
  std::atomic<const char*> doing_{""};
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool armed_ = false;
  int64_t step_ = 0;
  std::chrono::steady_clock::time_point interval_start_;
  double counted_s_ = 0.0;   // the interval's time, as the watching thread counts it
  double slowest_s_ = -1.0;  // the slowest interval that has ended; -1: none yet
  std::thread thread_;       // last: it starts once the members above exist
};

}  // namespace loom::launch
