#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "parallel/heartbeat.h"

using Catch::Matchers::StartsWith;
using loom::parallel::Heartbeat;
using namespace std::chrono_literals;

namespace {

// Ranks of one job as heartbeats in one process, sharing an in-memory store.
c10::intrusive_ptr<c10d::Store> shared_store() {
  return c10::make_intrusive<c10d::HashStore>();
}

// A store that stops answering, as one served by a stopped process does: add blocks until resumed.
class StoppableStore : public c10d::PrefixStore {
 public:
  StoppableStore() : c10d::PrefixStore("", c10::make_intrusive<c10d::HashStore>()) {}
  int64_t add(const std::string& key, int64_t value) override {
    std::unique_lock<std::mutex> lock(mutex_);
    resumed_.wait(lock, [&] { return !stopped_; });
    return c10d::PrefixStore::add(key, value);
  }
  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  void resume() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = false;
    resumed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable resumed_;
  bool stopped_ = false;
};

}  // namespace

TEST_CASE("a rank that never beats is named, and only that one", "[heartbeat]") {
  auto store = shared_store();
  Heartbeat rank0(store, 0, 3, "rank 0", 20ms), rank1(store, 1, 3, "rank 0", 20ms);
  const std::string said = rank0.silent_ranks(300ms);
  CHECK_THAT(said, StartsWith("rank 2 stopped answering: no heartbeat in 0.3 s"));
  CHECK(rank1.silent_ranks(300ms) == said);
}

TEST_CASE("a rank whose heartbeat stops is named; ranks that still beat are not", "[heartbeat]") {
  auto store = shared_store();
  Heartbeat rank0(store, 0, 4, "rank 0", 20ms), rank2(store, 2, 4, "rank 0", 20ms);
  auto rank1 = std::make_unique<Heartbeat>(store, 1, 4, "rank 0", 20ms);
  auto rank3 = std::make_unique<Heartbeat>(store, 3, 4, "rank 0", 20ms);
  CHECK_THAT(rank0.silent_ranks(300ms), StartsWith("every rank's heartbeat still moves"));
  rank1.reset();
  rank3.reset();
  CHECK_THAT(rank2.silent_ranks(300ms), StartsWith("ranks 1, 3 stopped answering"));
}

TEST_CASE("a store that stops answering is reported in bounded time, naming its server", "[heartbeat]") {
  auto store = c10::make_intrusive<StoppableStore>();
  auto heartbeat = std::make_unique<Heartbeat>(store, 1, 2, "rank 0", 20ms);
  store->stop();
  const auto start = std::chrono::steady_clock::now();
  const std::string said = heartbeat->silent_ranks(300ms);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(said ==
        "the rendezvous store, which rank 0 serves, did not answer in 0.38 s, so rank 0 stopped answering (a process "
        "stopped or dead, or a host down)");
  // Its thread is blocked in the store: the heartbeat leaves it behind rather than wait on it.
  const auto destroyed = std::chrono::steady_clock::now();
  heartbeat.reset();
  CHECK(std::chrono::steady_clock::now() - destroyed < 2s);
  store->resume();
}

TEST_CASE("a world of one has no heartbeat to report", "[heartbeat]") {
  Heartbeat alone({}, 0, 1, "rank 0");
  CHECK(alone.silent_ranks(300ms).empty());
}
