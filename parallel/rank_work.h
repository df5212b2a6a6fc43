// One rank's share of a job that every rank waits for together (its files of a checkpoint, rank
// 0's publishing of them), run on a thread of its own so that the calling thread can meet the
// other ranks meanwhile (wait_for_every_rank).
//
// Why meet at all: a single collective around such a wait must be bounded by the slowest disk
// (checkpoint.timeout_s, an hour by default), so a rank that stopped (SIGSTOP, a dead host whose
// sockets stay open) in the middle of its save held every other rank for that hour. Meeting every
// poll in small collectives bounded by parallel.timeout_s tells the two apart: a live rank whose
// disk is slow keeps meeting and is waited for, a stopped one misses a meeting and the job ends
// as it would in training (the heartbeats name the rank).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "parallel/communicator.h"

namespace loom::parallel {

class RankWork {
 public:
  enum Status { done = 0, running = 1, failed = 2 };

  // Starts WORK on a thread of its own; an empty WORK is done at once.
  explicit RankWork(std::function<void()> work);
  // Joins a finished thread; leaves one still running behind (a job that stops while its disk
  // hangs must not wait for it), with the state it uses.
  ~RankWork();
  RankWork(const RankWork&) = delete;
  RankWork& operator=(const RankWork&) = delete;

  Status status() const;
  // Blocks until the work is done or failed, or TIMEOUT has passed; the status then.
  Status wait_for(std::chrono::milliseconds timeout);
  // Why it failed (the exception's message); empty otherwise.
  std::string error() const;
  // The status as the ranks share it: done 0, running 1, failed 2 or more by the kind of its error
  // (throw_work_failure). The largest of the ranks' codes is a verdict every rank can throw alike.
  int code() const;

  struct State;  // rank_work.cpp's; shared with the thread, which may outlive this object

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

// MESSAGE as the error a failed work's CODE (RankWork::code, 2 or more) stands for: InputError,
// EnvironmentError or, for any other, std::runtime_error.
[[noreturn]] void throw_work_failure(int code, const std::string& message);

// Collective over COMM: returns once every rank's WORK is done. Until then the ranks meet each POLL
// (a rank whose work is done meets at once) in an all-reduce of every rank's status bounded by
// COMM's own timeout (parallel.timeout_s): a rank that stops answering ends the wait with a
// CommError, as in training, while a live rank's work is waited for up to WORK_BOUND. Every rank
// throws alike: EnvironmentError naming WHAT and the ranks whose work failed (this rank's error
// when it is one of them) or ran past WORK_BOUND. POLL is at most a quarter of COMM's timeout, and
// WORK_BOUND is kept to within about a POLL.
void wait_for_every_rank(Communicator& comm, RankWork& work, const WaitBound& work_bound, const std::string& what,
                         std::chrono::milliseconds poll = std::chrono::seconds(1));

}  // namespace loom::parallel
