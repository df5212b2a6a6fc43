// Which rank stopped answering, when a collective times out.
//
// Every rank counts its heartbeats in the rendezvous store, once a period, from a thread of its
// own. A collective's timeout says only that some peer did not answer; the rank that saw it then
// reads every rank's count twice, a window apart. A rank whose count did not move has stopped
// answering (its process is stopped or dead, or its host is down), unless it marked that it left
// after such a check of its own; one whose count moved is alive. Each beat also carries whether
// the rank is inside a collective (parallel/collective_presence.h): a live rank that stayed outside
// every collective through the window, and is not checking on a failure of its own, is stuck in
// its own work; one inside a collective waits on yet another rank.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "parallel/c10d_compat.h"
#include "parallel/collective_presence.h"

namespace loom::parallel {

class Heartbeat {
 public:
  // STORE is this heartbeat's own connection (LaunchEnv::connect_store); null for a world of 1,
  // where nothing beats. SERVER_RANK is the rank whose process serves the store, -1 when the
  // torchrun agent does. A beat the store does not answer (a network outage between this rank and
  // the store's host, which training over its own links may outlive) is said once and retried
  // every period, over a new connection from RECONNECT where given; beats that resume are said too,
  // so that a later check names the ranks as they are, not as they were during the outage.
  Heartbeat(c10d_compat::StorePtr store, int rank, int world, int server_rank,
            std::chrono::milliseconds period = std::chrono::seconds(1),
            std::function<c10d_compat::StorePtr()> reconnect = {});
  // Stops the thread; leaves it behind, rather than wait forever, when it is blocked on a store
  // that stopped answering.
  ~Heartbeat();
  // The same, before the end of its scope: no beat reaches the store after it returns (a job ends
  // with every rank's stop before any rank leaves, so that the rank serving the store takes it
  // away from nobody). silent_ranks() after it returns empty. Once is enough; again, nothing.
  void stop();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // From now on each beat carries whether this process is inside a collective (its communicators'
  // CommStats::presence). Without it this rank is never named as stuck in its own work.
  void watch(std::shared_ptr<const CollectivePresence> presence);

  // One clause for an error message: the ranks whose counts did not move during WINDOW, the live
  // ranks that stayed outside every collective through it, or that there are none of either, or
  // that the store itself did not answer. Marks this rank as having checked, since it
  // leaves next. The rank that serves the store, whose leaving takes the store away, first waits
  // (one more WINDOW at most) for the ranks still beating to finish their own checks. Returns in
  // bounded time whatever the store does; empty for a world of 1.
  std::string silent_ranks(std::chrono::milliseconds window);

  struct State;  // heartbeat.cpp's; shared with the thread, which may outlive this object

 private:
  static void beat(const std::shared_ptr<State>& state);
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace loom::parallel
