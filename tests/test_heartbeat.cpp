#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "parallel/heartbeat.h"

using Catch::Matchers::StartsWith;
using loom::parallel::CollectivePresence;
using loom::parallel::Heartbeat;
using loom::parallel::InsideCollective;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Ranks of one job as heartbeats in one process, sharing an in-memory store; rank 0 serves it.
c10::intrusive_ptr<c10d::Store> shared_store() {
  return c10::make_intrusive<c10d::HashStore>();
}

std::unique_ptr<Heartbeat> rank(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world) {
  return std::make_unique<Heartbeat>(store, rank, world, 0, 20ms);
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

// One rank's connection to a shared store that breaks, as a TCPStore client's does when the network
// to the store's host drops longer than its timeout: every call on it throws from then on.
class BreakableConnection : public c10d::PrefixStore {
 public:
  explicit BreakableConnection(const c10::intrusive_ptr<c10d::Store>& shared) : c10d::PrefixStore("", shared) {}
  int64_t add(const std::string& key, int64_t value) override {
    if (broken) throw std::runtime_error("recvValue failed: Connection timed out");
    return c10d::PrefixStore::add(key, value);
  }
  std::atomic<bool> broken{false};
};

}  // namespace

TEST_CASE("beats the store stopped answering resume over a new connection, and the rank is not named", "[heartbeat]") {
  auto store = shared_store();
  auto first = c10::make_intrusive<BreakableConnection>(store);
  auto reader = c10::make_intrusive<BreakableConnection>(store);  // rank 0's, never broken (keys as rank 1's)
  std::atomic<bool> network_up{true};
  std::atomic<int> reconnections{0};
  auto rank0 = rank(reader, 0, 2);
  auto rank1 = std::make_unique<Heartbeat>(first, 1, 2, 0, 20ms, [&]() -> c10::intrusive_ptr<c10d::Store> {
    ++reconnections;
    if (!network_up) throw std::runtime_error("connect: No route to host");
    return c10::make_intrusive<BreakableConnection>(store);
  });
  std::this_thread::sleep_for(60ms);
  network_up = false;
  first->broken = true;  // the outage: the old connection is dead, and no new one gets through
  std::this_thread::sleep_for(200ms);
  CHECK(reconnections >= 2);  // retried every period
  const int64_t during = reader->add("heartbeat/1", 0);
  CHECK(during > 0);
  std::this_thread::sleep_for(60ms);
  CHECK(reader->add("heartbeat/1", 0) == during);  // silent while the network is down
  network_up = true;                               // healed: the next period's connection works
  std::this_thread::sleep_for(200ms);
  CHECK(reader->add("heartbeat/1", 0) > during);  // beating again
  // A check now names nobody, on either side (rank 1's thread did not end with the outage's error).
  auto said0 = std::async(std::launch::async, [&] { return rank0->silent_ranks(300ms); });
  CHECK_THAT(rank1->silent_ranks(300ms), StartsWith("no rank stopped answering"));
  CHECK_THAT(said0.get(), StartsWith("no rank stopped answering"));
}

TEST_CASE("a rank whose store connection broke for good is named silent; its own check names the store",
          "[heartbeat]") {
  auto store = shared_store();
  auto broken = c10::make_intrusive<BreakableConnection>(store);
  auto rank0 = rank(c10::make_intrusive<BreakableConnection>(store), 0, 2);
  auto rank1 = std::make_unique<Heartbeat>(broken, 1, 2, 0, 20ms);  // no reconnection
  std::this_thread::sleep_for(60ms);
  broken->broken = true;
  std::this_thread::sleep_for(60ms);
  auto said0 = std::async(std::launch::async, [&] { return rank0->silent_ranks(300ms); });
  CHECK(rank1->silent_ranks(300ms) ==
        "the rendezvous store, which rank 0 serves, failed (recvValue failed: Connection timed out): rank 0 has left "
        "or died, or this rank cannot reach it");
  CHECK_THAT(said0.get(), StartsWith("rank 1 stopped answering: no heartbeat in 0.3 s"));
}

TEST_CASE("a rank that never beats is named, and only that one", "[heartbeat]") {
  auto store = shared_store();
  auto rank0 = rank(store, 0, 3), rank1 = rank(store, 1, 3);
  auto said0 = std::async(std::launch::async, [&] { return rank0->silent_ranks(300ms); });
  const std::string said1 = rank1->silent_ranks(300ms);
  CHECK_THAT(said1, StartsWith("rank 2 stopped answering: no heartbeat in 0.3 s"));
  CHECK(said0.get() == said1);
}

TEST_CASE("a rank whose heartbeat stops is named; ranks that still beat are not", "[heartbeat]") {
  auto store = shared_store();
  auto rank0 = rank(store, 0, 4), rank1 = rank(store, 1, 4), rank2 = rank(store, 2, 4), rank3 = rank(store, 3, 4);
  rank1.reset();
  rank3.reset();
  CHECK_THAT(rank2->silent_ranks(300ms), StartsWith("ranks 1, 3 stopped answering"));
}

TEST_CASE("a rank that left after a check of its own is not named", "[heartbeat]") {
  auto store = shared_store();
  auto rank0 = rank(store, 0, 3), rank1 = rank(store, 1, 3), rank2 = rank(store, 2, 3);
  CHECK_THAT(rank1->silent_ranks(300ms), StartsWith("no rank stopped answering"));
  rank1.reset();
  CHECK_THAT(rank2->silent_ranks(300ms), StartsWith("no rank stopped answering"));
}

TEST_CASE("the rank serving the store waits for the ranks still beating to finish their checks", "[heartbeat]") {
  auto store = shared_store();
  auto rank0 = rank(store, 0, 3), rank1 = rank(store, 1, 3);
  const auto start = Clock::now();
  auto said0 = std::async(std::launch::async, [&] {
    const std::string said = rank0->silent_ranks(300ms);
    return std::make_pair(said, Clock::now());
  });
  std::this_thread::sleep_for(200ms);
  CHECK_THAT(rank1->silent_ranks(300ms), StartsWith("rank 2 stopped answering"));
  const auto [said, answered] = said0.get();
  CHECK_THAT(said, StartsWith("rank 2 stopped answering"));
  // Alone, rank 0 would have answered after its own 300 ms; rank 1 marked its check after 500.
  CHECK(answered - start >= 500ms);
}

TEST_CASE("a store that stops answering is reported in bounded time, naming its server", "[heartbeat]") {
  auto store = c10::make_intrusive<StoppableStore>();
  auto heartbeat = rank(store, 1, 2);
  store->stop();
  const auto start = Clock::now();
  const std::string said = heartbeat->silent_ranks(300ms);
  CHECK(Clock::now() - start < 2s);
  CHECK(said ==
        "the rendezvous store, which rank 0 serves, did not answer in 0.38 s: rank 0 stopped answering (a process "
        "stopped or dead, a host down), or this rank cannot reach it");
  // Its thread is blocked in the store: the heartbeat leaves it behind rather than wait on it.
  const auto destroyed = Clock::now();
  heartbeat.reset();
  CHECK(Clock::now() - destroyed < 2s);
  store->resume();
}

TEST_CASE("a live rank outside every collective is named as stuck; one inside a collective is not", "[heartbeat]") {
  auto store = shared_store();
  auto rank0 = rank(store, 0, 3), rank1 = rank(store, 1, 3), rank2 = rank(store, 2, 3);
  auto waiting = std::make_shared<CollectivePresence>(), working = std::make_shared<CollectivePresence>();
  waiting->inside = 1;
  rank1->watch(waiting);
  rank2->watch(working);
  std::this_thread::sleep_for(100ms);  // a few beats: both readings in the store
  CHECK_THAT(rank0->silent_ranks(300ms),
             StartsWith("rank 2 is alive but in no collective through the 0.3 s check: stuck in its own work"));
}

TEST_CASE("a rank checking on a failure of its own, or whose collectives move, is not stuck", "[heartbeat]") {
  auto store = shared_store();
  auto rank0 = rank(store, 0, 3), rank1 = rank(store, 1, 3), rank2 = rank(store, 2, 3);
  auto failed0 = std::make_shared<CollectivePresence>(), failed1 = std::make_shared<CollectivePresence>();
  auto busy = std::make_shared<CollectivePresence>();
  rank0->watch(failed0);
  rank1->watch(failed1);
  rank2->watch(busy);
  std::atomic<bool> done{false};
  std::thread collectives([&] {  // rank 2 goes in and out of short collectives
    while (!done) {
      InsideCollective inside(busy.get());
      std::this_thread::sleep_for(5ms);
    }
  });
  std::this_thread::sleep_for(100ms);
  auto said0 = std::async(std::launch::async, [&] { return rank0->silent_ranks(300ms); });
  const std::string said1 = rank1->silent_ranks(300ms);
  done = true;
  collectives.join();
  CHECK_THAT(said1, StartsWith("no rank stopped answering, and none stayed outside its collectives"));
  CHECK(said0.get() == said1);
}

TEST_CASE("a collective inside another is counted once", "[heartbeat]") {
  CollectivePresence presence;
  CHECK(presence.reading() == 0);
  {
    InsideCollective outer(&presence);
    CHECK(presence.reading() == 1);
    {
      InsideCollective inner(&presence);
      CHECK(presence.reading() == 1);
    }
    CHECK(presence.reading() == 1);
  }
  CHECK(presence.reading() == 2);
  InsideCollective nothing(nullptr);  // counts nothing
  CHECK(presence.reading() == 2);
}

TEST_CASE("a collective that fails leaves its thread counted inside", "[heartbeat]") {
  CollectivePresence presence;
  try {
    InsideCollective failing(&presence);
    throw std::runtime_error("timed out");
  } catch (const std::runtime_error&) {
    CHECK(presence.reading() == 1);  // a victim winding down, never stuck in its own work
  }
}

TEST_CASE("a world of one has no heartbeat to report", "[heartbeat]") {
  Heartbeat alone({}, 0, 1, 0);
  CHECK(alone.silent_ranks(300ms).empty());
}

TEST_CASE("a stopped heartbeat writes no more beats and reports nothing", "[heartbeat]") {
  auto store = shared_store();
  auto rank0 = rank(store, 0, 2);
  std::this_thread::sleep_for(60ms);  // (a few beats; the check below needs only that none follow the stop)
  rank0->stop();
  const int64_t beats = store->add("heartbeat/0", 0);
  std::this_thread::sleep_for(60ms);
  CHECK(store->add("heartbeat/0", 0) == beats);
  CHECK(rank0->silent_ranks(300ms).empty());
  rank0->stop();  // again: nothing
}
