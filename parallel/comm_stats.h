// Counters of every collective: calls, payload bytes and seconds, per group kind
// and per op, the bytes this rank put on the wire to each peer, and a running
// least-squares fit of time against bytes per op. One instance per process,
// shared by its communicators.
//
// Bytes are the payload of the call as this rank sees it: all_reduce and
// broadcast the tensor; all_gather the gathered output; reduce_scatter the
// input; all_to_all the bytes this rank sends; send_recv the bytes sent plus
// received. "Sent" is what this rank transmits under the algorithm the
// counters assume (ring for all_reduce, all_gather and reduce_scatter; the
// root to every rank for broadcast; exact for all_to_all and send_recv): an
// all_reduce of n bytes over P ranks sends 2 (P-1) n / P to the next rank.
// Groups of one rank move nothing and are not counted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "parallel/collective_presence.h"

namespace loom::parallel {

struct CommCounter {
  int64_t calls = 0;
  int64_t bytes = 0;
  int64_t sent = 0;
  double seconds = 0.0;
};

// Time = alpha + beta * bytes, fitted by least squares over completed calls.
struct AlphaBetaFit {
  int64_t samples = 0;
  double alpha_s = 0.0;
  double beta_s_per_byte = 0.0;
};

class CommStats {
 public:
  // SENDS: (global rank, bytes) this call transmits to each peer.
  void record_call(const std::string& group, const std::string& op, int64_t bytes,
                   const std::vector<std::pair<int64_t, int64_t>>& sends = {});
  void record_time(const std::string& group, const std::string& op, double seconds, int64_t bytes = 0);
  // Time this process spent blocked issuing or waiting for a collective of GROUP's OP: what slower
  // peers and the wire cost it, the communication exposed on its critical path.
  void record_blocked(const std::string& group, const std::string& op, double seconds);
  // Over the run so far: in all, and per (group, op).
  double blocked_seconds() const;
  std::map<std::pair<std::string, std::string>, double> blocked_by_op() const;
  CommCounter get(const std::string& group, const std::string& op) const;
  // Every (group, op) counted so far.
  std::map<std::pair<std::string, std::string>, CommCounter> counters() const;
  // Bytes sent to each global rank, whole run.
  std::map<int64_t, int64_t> sent_to() const;
  // The same per (group, op): what the traffic report splits into intra- and inter-node bytes.
  std::map<std::pair<std::string, std::string>, std::map<int64_t, int64_t>> sent_to_by_op() const;
  // The fit per op over all groups; ops with fewer than two distinct sizes get beta 0.
  std::map<std::string, AlphaBetaFit> fits() const;
  // {"dp": {"all_reduce": {"calls": .., "bytes": .., "sent": .., "seconds": ..}}, ...}
  nlohmann::json to_json() const;
  void reset();
  // Whether this process is inside a collective now, which its communicators keep and the
  // heartbeat publishes (parallel/heartbeat.h); not cleared by reset.
  const std::shared_ptr<CollectivePresence>& presence() const { return presence_; }

 private:
  struct Regression {
    double n = 0, x = 0, y = 0, xx = 0, xy = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, CommCounter> counters_;
  std::map<int64_t, int64_t> sent_to_;
  std::map<std::pair<std::string, std::string>, std::map<int64_t, int64_t>> sent_to_by_op_;
  std::map<std::string, Regression> regressions_;
  double blocked_s_ = 0.0;
  std::map<std::pair<std::string, std::string>, double> blocked_by_op_;
  std::shared_ptr<CollectivePresence> presence_ = std::make_shared<CollectivePresence>();
};

}  // namespace loom::parallel
