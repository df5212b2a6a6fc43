// Whether this process is inside a collective (issuing one or waiting for it), for the heartbeat
// to publish: when a collective times out, a rank that is alive and stays outside every
// collective is stuck in its own work, where one inside a collective waits on a peer.
#pragma once

#include <atomic>
#include <cstdint>

namespace loom::parallel {

struct CollectivePresence {
  std::atomic<int64_t> inside{0};  // threads inside a collective now (counted at their outermost entry)
  std::atomic<int64_t> exits{0};   // outermost exits so far

  // One number that grows at every outermost entry and exit, odd while some thread is inside.
  int64_t reading() const { return 2 * exits.load() + (inside.load() > 0 ? 1 : 0); }
};

// Counts the calling thread in PRESENCE for its lifetime; a collective entered inside another
// (a composite's steps) is not counted again. A null PRESENCE counts nothing. One left by an
// exception (the collective failed) keeps its thread counted inside: that rank is then a victim
// of the failure, not stuck in its own work, however long it takes to wind down.
class InsideCollective {
 public:
  explicit InsideCollective(CollectivePresence* presence);
  ~InsideCollective();
  InsideCollective(const InsideCollective&) = delete;
  InsideCollective& operator=(const InsideCollective&) = delete;

 private:
  CollectivePresence* presence_;
  int uncaught_;  // exceptions in flight at entry
};

}  // namespace loom::parallel
