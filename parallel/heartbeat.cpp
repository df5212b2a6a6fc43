#include "parallel/heartbeat.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

namespace loom::parallel {
namespace {

using Clock = std::chrono::steady_clock;

std::string key(int rank) {
  return "heartbeat/" + std::to_string(rank);
}

// add(key, 0) reads a count without waiting for a rank that never beat (its count is then 0).
std::vector<int64_t> read_counts(c10d_compat::Store& store, int world) {
  std::vector<int64_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = store.add(key(r), 0);
  return counts;
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

std::string describe(const std::vector<int>& silent, std::chrono::milliseconds window) {
  if (silent.empty()) {
    return "every rank's heartbeat still moves, so none has stopped: one is stuck in its own work or waits on "
           "another group";
  }
  constexpr size_t kNamed = 16;
  std::ostringstream s;
  s << (silent.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < silent.size() && i < kNamed; ++i) s << (i ? ", " : "") << silent[i];
  if (silent.size() > kNamed) s << " and " << silent.size() - kNamed << " more";
  s << " stopped answering: no heartbeat in " << seconds(window) << " (a process stopped or dead, or a host down)";
  return s.str();
}

}  // namespace

struct Heartbeat::State {
  c10d_compat::StorePtr store;
  int rank = 0;
  int world = 1;
  std::string server;
  std::chrono::milliseconds period{0};

  std::mutex mutex;
  std::condition_variable changed;
  bool stop = false;
  bool running = true;  // until the thread returns
  std::string failure;  // the store's error that ended the thread
  // A sample that silent_ranks asked for: the first counts and when they were read, then the answer.
  bool asked = false;
  std::chrono::milliseconds window{0};
  std::vector<int64_t> first;
  Clock::time_point first_read;
  std::optional<std::vector<int>> silent;
};

// The thread: one beat a period, and a sample's two readings when one is asked for. Blocks in
// the store, holding no lock, when the store stops answering.
void Heartbeat::beat(const std::shared_ptr<State>& s) {
  try {
    for (;;) {
      s->store->add(key(s->rank), 1);
      bool read = false;
      {
        std::lock_guard<std::mutex> lock(s->mutex);
        if (s->stop) break;
        read = s->asked && (s->first.empty() || Clock::now() - s->first_read >= s->window);
      }
      if (read) {
        std::vector<int64_t> counts = read_counts(*s->store, s->world);
        std::lock_guard<std::mutex> lock(s->mutex);
        if (s->first.empty()) {
          s->first = std::move(counts);
          s->first_read = Clock::now();
        } else {
          std::vector<int> silent;
          for (int r = 0; r < s->world; ++r) {
            if (counts[static_cast<size_t>(r)] == s->first[static_cast<size_t>(r)]) silent.push_back(r);
          }
          s->silent = std::move(silent);
          s->asked = false;
          s->changed.notify_all();
        }
      }
      std::unique_lock<std::mutex> lock(s->mutex);
      s->changed.wait_for(lock, s->period, [&] { return s->stop || (s->asked && s->first.empty()); });
      if (s->stop) break;
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->failure = reason(e);
  }
  std::lock_guard<std::mutex> lock(s->mutex);
  s->running = false;
  s->changed.notify_all();
}

Heartbeat::Heartbeat(c10d_compat::StorePtr store, int rank, int world, std::string server,
                     std::chrono::milliseconds period) {
  if (!store) return;
  state_ = std::make_shared<State>();
  state_->store = std::move(store);
  state_->rank = rank;
  state_->world = world;
  state_->server = std::move(server);
  state_->period = period;
  thread_ = std::thread(beat, state_);
}

Heartbeat::~Heartbeat() {
  if (!state_) return;
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

std::string Heartbeat::silent_ranks(std::chrono::milliseconds window) {
  if (!state_) return "";
  State& s = *state_;
  const std::chrono::milliseconds deadline = window + 4 * s.period;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.asked = true;
  s.window = window;
  s.first.clear();
  s.silent.reset();
  s.changed.notify_all();
  s.changed.wait_for(lock, deadline, [&] { return s.silent.has_value() || !s.running; });
  if (s.silent) return describe(*s.silent, window);
  const std::string store = "the rendezvous store, which " + s.server + " serves, ";
  if (!s.running) return store + "failed (" + s.failure + "), so " + s.server + " may have died";
  return store + "did not answer in " + seconds(deadline) + ", so " + s.server +
         " stopped answering (a process stopped or dead, or a host down)";
}

}  // namespace loom::parallel
