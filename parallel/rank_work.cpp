#include "parallel/rank_work.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/errors.h"
#include "parallel/rank_names.h"

namespace loom::parallel {

using Clock = std::chrono::steady_clock;

struct RankWork::State {
  std::function<void()> work;
  std::mutex mutex;
  std::condition_variable finished;
  Status status = running;
  std::exception_ptr failure;
  std::string error;
};

namespace {

std::string message_of(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

// How a rank's work failed, shared with the others so that every rank throws the same kind of error
// (and so exits with the same code): the status value a failed rank sends.
enum FailureKind { environment = 2, input = 3, other = 4 };

int failure_code(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const InputError&) {
    return input;
  } catch (const EnvironmentError&) {
    return environment;
  } catch (const std::filesystem::filesystem_error& e) {  // a rename or removal: the path's or the machine's
    return machine_file_error(e.code().value()) ? environment : input;
  } catch (...) {
    return other;
  }
}

// RANKS of COMM's group as global ranks.
std::vector<int64_t> global_ranks(const std::vector<int>& ranks, const Communicator& comm) {
  std::vector<int64_t> global;
  for (int r : ranks) global.push_back(comm.ranks()[static_cast<size_t>(r)]);
  return global;
}

}  // namespace

RankWork::RankWork(std::function<void()> work) : state_(std::make_shared<State>()) {
  if (!work) {
    state_->status = done;
    return;
  }
  state_->work = std::move(work);
  thread_ = std::thread([state = state_] {
    Status status = done;
    std::exception_ptr failure;
    std::string error;
    try {
      state->work();
    } catch (const std::exception& e) {
      status = failed;
      failure = std::current_exception();
      error = message_of(e);
    } catch (...) {
      status = failed;
      failure = std::current_exception();
      error = "an unknown error";
    }
    std::function<void()> finished_work;
    std::lock_guard<std::mutex> lock(state->mutex);
    std::swap(finished_work, state->work);  // what it holds is let go of here, not with the state
    state->status = status;
    state->failure = failure;
    state->error = std::move(error);
    state->finished.notify_all();
  });
}

RankWork::~RankWork() {
  if (!thread_.joinable()) return;
  if (status() == running) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

RankWork::Status RankWork::status() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->status;
}

RankWork::Status RankWork::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->finished.wait_for(lock, timeout, [&] { return state_->status != running; });
  return state_->status;
}

std::string RankWork::error() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->error;
}

int RankWork::code() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->status == failed ? failure_code(state_->failure) : state_->status;
}

void throw_work_failure(int code, const std::string& message) {
  if (code == input) throw InputError(message);
  if (code == environment) throw EnvironmentError(message);
  throw std::runtime_error(message);
}

void wait_for_every_rank(Communicator& comm, RankWork& work, const WaitBound& work_bound, const std::string& what,
                         std::chrono::milliseconds poll) {
  const auto start = Clock::now();
  // Alone, there is no one to meet (and a group of one has no timeout): the work is only watched.
  const auto period =
      comm.size() == 1 ? poll : std::max(std::chrono::milliseconds(1), std::min(poll, comm.timeout() / 4));
  const int64_t size = comm.size();
  for (;;) {
    work.wait_for(period);
    const int code = work.code();  // (read once: the work may end meanwhile)
    const bool mine_failed = code >= RankWork::failed;
    // One slot per rank (0 done, 1 running, else how it failed), and whether any rank's wait ran out.
    auto slots = torch::zeros({size + 1}, torch::kFloat64);
    slots[comm.rank()] = code;
    slots[size] = Clock::now() - start >= work_bound.timeout ? 1.0 : 0.0;
    try {
      comm.all_reduce(slots, ReduceOp::max).wait();
    } catch (const CommError& e) {
      // A peer stopped answering; this rank's own failure (a full disk) is still said, first.
      if (!mine_failed) throw;
      throw_work_failure(code, what + " failed on this rank: " + work.error() + "; then " + e.what());
    }
    const double* read = slots.data_ptr<double>();
    std::vector<int> failed, running;
    for (int r = 0; r < size; ++r) {
      if (read[r] >= RankWork::failed) failed.push_back(r);
      if (read[r] == RankWork::running) running.push_back(r);
    }
    if (!failed.empty()) {
      const int kind = static_cast<int>(read[failed.front()]);
      if (mine_failed) throw_work_failure(kind, what + " failed on this rank: " + work.error());
      throw_work_failure(kind, what + " failed on " + name_ranks(global_ranks(failed, comm)) + " (see its error)");
    }
    if (running.empty()) return;
    if (read[size] > 0) {
      std::ostringstream s;
      s << what << ": " << name_ranks(global_ranks(running, comm)) << " had not finished after "
        << std::chrono::duration<double>(work_bound.timeout).count() << " s, " << work_bound.key
        << " (it still answers: a slow or hung file system, not a dead rank)";
      throw EnvironmentError(s.str());
    }
  }
}

}  // namespace loom::parallel
