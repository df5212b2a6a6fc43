#include "parallel/heartbeat.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "core/logging.h"
#include "parallel/rank_names.h"

namespace loom::parallel {

using Clock = std::chrono::steady_clock;

namespace {

// What a check found.
struct Verdict {
  std::vector<int> silent;    // no heartbeat through the window: stopped or dead
  std::vector<int> stuck;     // beating, but outside every collective through the window
  bool all_published = true;  // every live rank said whether it was inside a collective
};

}  // namespace

struct Heartbeat::State {
  c10d_compat::StorePtr store;  // the thread's own, replaced by a reconnection
  std::function<c10d_compat::StorePtr()> reconnect;
  int rank = 0;
  int world = 1;
  int server_rank = 0;
  std::chrono::milliseconds period{0};
  int64_t published = 0;  // the presence reading this rank's last beat put in the store (the thread's own)

  std::mutex mutex;
  std::shared_ptr<const CollectivePresence> presence;  // null until watched
  std::condition_variable changed;
  bool stop = false;
  bool running = true;                             // until the thread returns
  std::string failure;                             // the store's error that ended the thread, or that beats meet now
  std::optional<std::chrono::milliseconds> asked;  // a check's window, until the thread takes it up
  std::optional<Verdict> verdict;                  // the check's answer
};

namespace {

std::string count_key(int rank) {
  return "heartbeat/" + std::to_string(rank);
}

std::string checked_key(int rank) {
  return "heartbeat_checked/" + std::to_string(rank);
}

// Set when a rank starts a check: from then on it is outside its collectives because it saw a failure.
std::string checking_key(int rank) {
  return "heartbeat_checking/" + std::to_string(rank);
}

// The presence reading plus one, so that 0 means a rank that publishes none.
std::string presence_key(int rank) {
  return "heartbeat_presence/" + std::to_string(rank);
}

// One beat: the count, and the presence reading when it changed (by the difference: add is the
// store's only write that a reader never waits on).
void beat_once(Heartbeat::State& s) {
  s.store->add(count_key(s.rank), 1);
  std::shared_ptr<const CollectivePresence> presence;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    presence = s.presence;
  }
  if (!presence) return;
  const int64_t reading = presence->reading() + 1;
  if (reading == s.published) return;
  s.store->add(presence_key(s.rank), reading - s.published);
  s.published = reading;
}

// add(key, 0) reads a number without waiting for a rank that never wrote it (it is then 0).
std::vector<int64_t> read_all(c10d_compat::Store& store, int world, std::string (*key)(int)) {
  std::vector<int64_t> values(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) values[static_cast<size_t>(r)] = store.add(key(r), 0);
  return values;
}

// Keeps beating, once a period, until UNTIL; false when asked to stop first. A rank checking on the
// others must not fall silent itself.
bool beat_until(Heartbeat::State& s, Clock::time_point until) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      s.changed.wait_until(lock, std::min(until, Clock::now() + s.period), [&] { return s.stop; });
      if (s.stop) return false;
    }
    if (Clock::now() >= until) return true;
    beat_once(s);
  }
}

// Two readings of every count and presence, WINDOW apart: the ranks whose count did not move and
// that did not mark a check of their own (silent), and the live ranks whose presence stayed the
// same and outside a collective that are not checking (stuck). Then this rank marks its check; the
// rank serving the store waits for the ranks still beating to mark theirs, at most one more WINDOW
// and two periods.
Verdict check(Heartbeat::State& s, std::chrono::milliseconds window) {
  s.store->add(checking_key(s.rank), 1);
  const std::vector<int64_t> before = read_all(*s.store, s.world, count_key);
  const std::vector<int64_t> present_before = read_all(*s.store, s.world, presence_key);
  if (!beat_until(s, Clock::now() + window)) return {};
  const std::vector<int64_t> after = read_all(*s.store, s.world, count_key);
  const std::vector<int64_t> present_after = read_all(*s.store, s.world, presence_key);
  const std::vector<int64_t> checking = read_all(*s.store, s.world, checking_key);
  std::vector<int64_t> checked = read_all(*s.store, s.world, checked_key);
  Verdict verdict;
  for (int r = 0; r < s.world; ++r) {
    const auto i = static_cast<size_t>(r);
    if (after[i] == before[i]) {
      if (checked[i] == 0) verdict.silent.push_back(r);
      continue;
    }
    if (r == s.rank || checking[i] > 0) continue;
    if (present_after[i] == 0) {
      verdict.all_published = false;
    } else if (present_after[i] == present_before[i] && (present_after[i] - 1) % 2 == 0) {
      verdict.stuck.push_back(r);
    }
  }
  s.store->add(checked_key(s.rank), 1);
  if (s.rank != s.server_rank) return verdict;
  const Clock::time_point until = Clock::now() + window + 2 * s.period;
  for (;;) {
    checked = read_all(*s.store, s.world, checked_key);
    bool all = true;
    for (int r = 0; r < s.world; ++r) {
      const bool beating = std::find(verdict.silent.begin(), verdict.silent.end(), r) == verdict.silent.end();
      all = all && (!beating || r == s.rank || checked[static_cast<size_t>(r)] > 0);
    }
    if (all || Clock::now() >= until || !beat_until(s, std::min(until, Clock::now() + s.period))) return verdict;
  }
}

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream s;
  s << std::chrono::duration<double>(duration).count() << " s";
  return s.str();
}

std::string reason(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

std::string describe(const Verdict& verdict, std::chrono::milliseconds window) {
  std::vector<std::string> clauses;
  if (!verdict.silent.empty()) {
    clauses.push_back(name_ranks(std::vector<int64_t>(verdict.silent.begin(), verdict.silent.end())) +
                      " stopped answering: no heartbeat in " + seconds(window) +
                      " (a process stopped or dead, a host down, or the network to it)");
  }
  if (!verdict.stuck.empty()) {
    clauses.push_back(name_ranks(std::vector<int64_t>(verdict.stuck.begin(), verdict.stuck.end())) +
                      (verdict.stuck.size() == 1 ? " is" : " are") + " alive but in no collective through the " +
                      seconds(window) + " check" +
                      ": stuck in its own work (a deadlock, a hung device or file system, a very slow step), "
                      "not waiting on a peer");
  }
  if (!clauses.empty()) return clauses.size() == 1 ? clauses[0] : clauses[0] + "; " + clauses[1];
  if (verdict.all_published) {
    return "no rank stopped answering, and none stayed outside its collectives (or each saw this failure too): "
           "they wait on each other (collectives issued in different orders on different ranks, or a link that "
           "stopped carrying data)";
  }
  return "no rank stopped answering (each heartbeat moves, or its rank saw this failure too): one is stuck in "
         "its own work or waits on another group";
}

// A beat, or after a failed one a new connection and a beat: false (the error in S.failure, said
// once) while the store does not answer. The presence reading is read back after a reconnection,
// since an add the store applied may have failed on its way back.
bool try_beat(Heartbeat::State& s, std::optional<Clock::time_point>& failing_since) {
  // Once stopped, the thread may have been left behind by a process on its way out (its store gone
  // with the rank serving it): it neither connects nor logs then, touching only its own state.
  auto stopping = [&] {
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.stop;
  };
  try {
    if (failing_since && s.reconnect && !stopping()) {
      s.store = s.reconnect();
      s.published = s.store->add(presence_key(s.rank), 0);
    }
    beat_once(s);
  } catch (const std::exception& e) {
    if (stopping()) return false;
    const std::string why = reason(e);
    if (!failing_since) {
      failing_since = Clock::now();
      log::warn(
          "rank {}: the rendezvous store did not answer its heartbeat ({}); training goes on, and the "
          "heartbeat retries every {}",
          s.rank, why.substr(0, why.find('\n')), seconds(s.period));
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    s.failure = why;
    return false;
  }
  if (failing_since && !stopping()) {
    log::warn("rank {}: the rendezvous store answers its heartbeat again, after {}", s.rank,
              seconds(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *failing_since)));
    failing_since.reset();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.failure.clear();
  }
  return true;
}

}  // namespace

// The thread: one beat a period, and a check when one is asked for. Blocks in the store, holding
// no lock, when the store stops answering. A failed beat is retried the next period; a failed
// check (this rank is about to leave) ends the thread.
void Heartbeat::beat(const std::shared_ptr<State>& s) {
  std::optional<Clock::time_point> failing_since;
  try {
    for (;;) {
      try_beat(*s, failing_since);
      std::optional<std::chrono::milliseconds> window;
      {
        std::unique_lock<std::mutex> lock(s->mutex);
        s->changed.wait_for(lock, s->period, [&] { return s->stop || s->asked; });
        if (s->stop) break;
        std::swap(window, s->asked);
      }
      if (!window) continue;
      Verdict verdict = check(*s, *window);
      std::lock_guard<std::mutex> lock(s->mutex);
      s->verdict = std::move(verdict);
      s->changed.notify_all();
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->failure = reason(e);
  }
  std::lock_guard<std::mutex> lock(s->mutex);
  s->running = false;
  s->changed.notify_all();
}

Heartbeat::Heartbeat(c10d_compat::StorePtr store, int rank, int world, int server_rank,
                     std::chrono::milliseconds period, std::function<c10d_compat::StorePtr()> reconnect) {
  if (!store) return;
  state_ = std::make_shared<State>();
  state_->store = std::move(store);
  state_->reconnect = std::move(reconnect);
  state_->rank = rank;
  state_->world = world;
  state_->server_rank = server_rank;
  state_->period = period;
  thread_ = std::thread(beat, state_);
}

Heartbeat::~Heartbeat() {
  stop();
}

void Heartbeat::stop() {
  if (!state_ || !thread_.joinable()) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->changed.notify_all();
  const bool returned = state_->changed.wait_for(lock, 2 * state_->period, [&] { return !state_->running; });
  lock.unlock();
  if (returned) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void Heartbeat::watch(std::shared_ptr<const CollectivePresence> presence) {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->presence = std::move(presence);
}

std::string Heartbeat::silent_ranks(std::chrono::milliseconds window) {
  if (!state_) return "";
  State& s = *state_;
  const bool serves = s.rank == s.server_rank;
  const std::chrono::milliseconds deadline =
      window + 4 * s.period + (serves ? window + 2 * s.period : std::chrono::milliseconds(0));
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.stop) return "";  // stopped (stop()): it no longer knows who beats
  s.asked = window;
  s.verdict.reset();
  s.changed.notify_all();
  s.changed.wait_for(lock, deadline, [&] { return s.verdict.has_value() || !s.running; });
  if (s.verdict) return describe(*s.verdict, window);
  const std::string server = s.server_rank >= 0 ? "rank " + std::to_string(s.server_rank) : "the torchrun agent";
  const std::string store = "the rendezvous store, which " + server + " serves, ";
  // Where the store is, this rank cannot tell a dead server from a network that no longer reaches it.
  if (!s.running)
    return store + "failed (" + s.failure + "): " + server + " has left or died, or this rank cannot reach it";
  return store + "did not answer in " + seconds(deadline) + ": " + server +
         " stopped answering (a process stopped or dead, a host down), or this rank cannot reach it";
}

}  // namespace loom::parallel
